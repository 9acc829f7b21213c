// Exact p-best n-gram rescoring of a sausage lattice with KenLM, exposed through a C ABI
// (loaded by blockdraft.rescorers.ngram.native with ctypes).
//
// The search (SPEC sec. 4): slot by slot, every partial path is a hypothesis; hypotheses whose
// KenLM right states are equal have identical futures, so they are recombined into one bucket
// that keeps only its p best (a path outside a bucket's top p can never enter the global top p).
// Expanding a bucket costs one KenLM lookup per arc of the next slot, however many hypotheses
// the bucket holds; the hypotheses of a new bucket are a p-way merge of its incoming edges'
// sorted lists (a heap). Scores are exact: KenLM's own backoff semantics and its own
// float log10 values, converted to natural log once per lookup.
//
// Units: head scores and all outputs are natural-log probabilities; alpha weights the LM part.

#include "lm/enumerate_vocab.hh"
#include "lm/model.hh"
#include "lm/state.hh"
#include "util/string_piece.hh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

const double kLn10 = 2.302585092994045684017991454684364208;

class CollectVocab : public lm::EnumerateVocab {
 public:
  void Add(lm::WordIndex index, const StringPiece &str) override {
    if (words.size() <= index) words.resize(index + 1);
    words[index].assign(str.data(), str.size());
  }
  std::vector<std::string> words;
};

struct Handle {
  lm::base::Model *model;
  std::vector<std::string> words;
  int order;
};

struct StateHash {
  size_t operator()(const lm::ngram::State &s) const { return lm::ngram::hash_value(s); }
};

struct Hyp {
  double total;  // head + alpha * lm, nats
  double head;   // nats
  double lm;     // nats (unweighted)
  int32_t parent;  // index into the previous slot's hypotheses, -1 for the root
  int32_t arc;     // index of the arc within this slot
};

// An incoming edge of a bucket: the hypotheses of bucket `from` extended by arc `arc`.
struct Edge {
  int32_t from;
  int32_t arc;
  double delta_total;
  double delta_lm;
};

struct Bucket {
  lm::ngram::State state;
  std::vector<int32_t> hyps;  // indices into the slot's hypothesis array, best first
  std::vector<Edge> in;
};

void SetError(char *err, int errlen, const std::string &msg) {
  if (err && errlen > 0) {
    std::strncpy(err, msg.c_str(), errlen - 1);
    err[errlen - 1] = '\0';
  }
}

}  // namespace

extern "C" {

void *bd_load(const char *path, char *err, int errlen) {
  try {
    CollectVocab vocab;
    lm::ngram::Config config;
    config.enumerate_vocab = &vocab;
    config.messages = nullptr;
    config.arpa_complain = lm::ngram::Config::NONE;
    lm::base::Model *model = lm::ngram::LoadVirtual(path, config);
    Handle *h = new Handle{model, std::move(vocab.words), static_cast<int>(model->Order())};
    return h;
  } catch (const std::exception &e) {
    SetError(err, errlen, e.what());
    return nullptr;
  }
}

void bd_free(void *handle) {
  Handle *h = static_cast<Handle *>(handle);
  if (!h) return;
  delete h->model;
  delete h;
}

int bd_order(void *handle) { return static_cast<Handle *>(handle)->order; }

uint32_t bd_vocab_size(void *handle) {
  return static_cast<uint32_t>(static_cast<Handle *>(handle)->words.size());
}

const char *bd_vocab_word(void *handle, uint32_t index) {
  Handle *h = static_cast<Handle *>(handle);
  if (index >= h->words.size()) return nullptr;
  return h->words[index].c_str();
}

uint32_t bd_index(void *handle, const char *word) {
  Handle *h = static_cast<Handle *>(handle);
  return h->model->BaseVocabulary().Index(StringPiece(word));
}

uint32_t bd_bos(void *handle) {
  return static_cast<Handle *>(handle)->model->BaseVocabulary().BeginSentence();
}

uint32_t bd_eos(void *handle) {
  return static_cast<Handle *>(handle)->model->BaseVocabulary().EndSentence();
}

// Start state: <s> when bos != 0, else the null context; then the context words in order.
static lm::ngram::State StartState(Handle *h, int bos, const uint32_t *ctx, int nctx) {
  lm::ngram::State state, next;
  if (bos) {
    h->model->BeginSentenceWrite(&state);
  } else {
    h->model->NullContextWrite(&state);
  }
  for (int i = 0; i < nctx; ++i) {
    h->model->BaseScore(&state, ctx[i], &next);
    state = next;
  }
  return state;
}

// Natural-log probability of each word given the start state and the words before it.
// Writes n values to out_ln; returns their sum.
double bd_score(void *handle, int bos, const uint32_t *ctx, int nctx, const uint32_t *words,
                int n, double *out_ln) {
  Handle *h = static_cast<Handle *>(handle);
  lm::ngram::State state = StartState(h, bos, ctx, nctx), next;
  double total = 0.0;
  for (int i = 0; i < n; ++i) {
    double s = static_cast<double>(h->model->BaseScore(&state, words[i], &next)) * kLn10;
    out_ln[i] = s;
    total += s;
    state = next;
  }
  return total;
}

// Exact p-best search over a sausage lattice.
//   words  [h*k]  KenLM word indices, row-major by slot; only the first counts[i] of slot i
//                 are arcs (the rest are padding)
//   head   [h*k]  head scores, nats
//   unk_ln        if not NaN, the LM log-prob (nats) given to words with index 0 (<unk>)
//                 instead of KenLM's <unk> probability
//   out_arcs [p*h] arc index per slot of each returned path, best first
//   out_total/out_head/out_lm [p]
//   stats [2*h]   per slot: number of distinct LM states after it, number of LM lookups
// Returns the number of paths written (min(p, number of paths)), or -1 on error.
int bd_pbest(void *handle, int bos, const uint32_t *ctx, int nctx, int h, int k,
             const uint32_t *words, const int32_t *counts, const double *head, double alpha,
             double unk_ln, int p, int32_t *out_arcs, double *out_total, double *out_head,
             double *out_lm, int64_t *stats) {
  Handle *hd = static_cast<Handle *>(handle);
  if (h <= 0 || k <= 0 || p <= 0) return -1;
  const bool penalize_unk = !std::isnan(unk_ln);

  std::vector<std::vector<Hyp>> slots(h);
  std::vector<Bucket> cur, next;
  std::vector<Hyp> root_hyps{Hyp{0.0, 0.0, 0.0, -1, -1}};
  cur.push_back(Bucket{StartState(hd, bos, ctx, nctx), {0}, {}});
  const std::vector<Hyp> *prev_hyps = &root_hyps;

  std::unordered_map<lm::ngram::State, int32_t, StateHash> index;
  // Heap entries for the p-way merge: (score, edge, position in the edge's source list).
  struct Cand {
    double score;
    int32_t edge;
    int32_t pos;
    bool operator<(const Cand &o) const { return score < o.score; }
  };
  std::vector<Cand> heap;

  for (int i = 0; i < h; ++i) {
    const int n_arcs = counts[i];
    if (n_arcs <= 0 || n_arcs > k) return -1;
    next.clear();
    index.clear();
    int64_t lookups = 0;
    // Expand: one LM lookup per (bucket, arc).
    for (int32_t b = 0; b < static_cast<int32_t>(cur.size()); ++b) {
      const lm::ngram::State &in_state = cur[b].state;
      for (int a = 0; a < n_arcs; ++a) {
        const uint32_t w = words[i * k + a];
        lm::ngram::State out_state;
        double lm_ln = static_cast<double>(hd->model->BaseScore(&in_state, w, &out_state)) * kLn10;
        ++lookups;
        if (penalize_unk && w == 0) lm_ln = unk_ln;
        auto it = index.find(out_state);
        int32_t nb;
        if (it == index.end()) {
          nb = static_cast<int32_t>(next.size());
          index.emplace(out_state, nb);
          next.push_back(Bucket{out_state, {}, {}});
        } else {
          nb = it->second;
        }
        next[nb].in.push_back(Edge{b, a, head[i * k + a] + alpha * lm_ln, lm_ln});
      }
    }
    // Merge: each new bucket keeps the p best of its incoming sorted lists.
    std::vector<Hyp> &hyps = slots[i];
    hyps.clear();
    for (Bucket &nbk : next) {
      heap.clear();
      for (int32_t e = 0; e < static_cast<int32_t>(nbk.in.size()); ++e) {
        const Edge &ed = nbk.in[e];
        const Bucket &src = cur[ed.from];
        heap.push_back(Cand{(*prev_hyps)[src.hyps[0]].total + ed.delta_total, e, 0});
      }
      std::make_heap(heap.begin(), heap.end());
      while (!heap.empty() && static_cast<int>(nbk.hyps.size()) < p) {
        std::pop_heap(heap.begin(), heap.end());
        Cand c = heap.back();
        heap.pop_back();
        const Edge &ed = nbk.in[c.edge];
        const Bucket &src = cur[ed.from];
        const Hyp &par = (*prev_hyps)[src.hyps[c.pos]];
        nbk.hyps.push_back(static_cast<int32_t>(hyps.size()));
        hyps.push_back(Hyp{par.total + ed.delta_total, par.head + head[i * k + ed.arc],
                           par.lm + ed.delta_lm, src.hyps[c.pos], ed.arc});
        if (c.pos + 1 < static_cast<int32_t>(src.hyps.size())) {
          const Hyp &nxt = (*prev_hyps)[src.hyps[c.pos + 1]];
          heap.push_back(Cand{nxt.total + ed.delta_total, c.edge, c.pos + 1});
          std::push_heap(heap.begin(), heap.end());
        }
      }
      nbk.in.clear();
      nbk.in.shrink_to_fit();
    }
    if (stats) {
      stats[2 * i] = static_cast<int64_t>(next.size());
      stats[2 * i + 1] = lookups;
    }
    std::swap(cur, next);
    prev_hyps = &slots[i];
  }

  // Final: the global p best over all buckets' lists (each sorted): one more p-way merge.
  std::vector<int32_t> best;
  heap.clear();
  for (int32_t b = 0; b < static_cast<int32_t>(cur.size()); ++b) {
    heap.push_back(Cand{(*prev_hyps)[cur[b].hyps[0]].total, b, 0});
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty() && static_cast<int>(best.size()) < p) {
    std::pop_heap(heap.begin(), heap.end());
    Cand c = heap.back();
    heap.pop_back();
    best.push_back(cur[c.edge].hyps[c.pos]);
    if (c.pos + 1 < static_cast<int32_t>(cur[c.edge].hyps.size())) {
      heap.push_back(Cand{(*prev_hyps)[cur[c.edge].hyps[c.pos + 1]].total, c.edge, c.pos + 1});
      std::push_heap(heap.begin(), heap.end());
    }
  }
  for (size_t r = 0; r < best.size(); ++r) {
    int32_t idx = best[r];
    const Hyp &fin = slots[h - 1][idx];
    out_total[r] = fin.total;
    out_head[r] = fin.head;
    out_lm[r] = fin.lm;
    for (int i = h - 1; i >= 0; --i) {
      const Hyp &hy = slots[i][idx];
      out_arcs[r * h + i] = hy.arc;
      idx = hy.parent;
    }
  }
  return static_cast<int>(best.size());
}

}  // extern "C"
