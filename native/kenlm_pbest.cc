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
// Pruning that keeps the search exact (branch and bound):
//  * an upper bound on the future: for each arc, the best score any completion could add,
//    from a backward pass over the lattice in which the LM term of a token is replaced by an
//    upper bound that depends only on the previous token (`Bounds`: the largest probability
//    of any n-gram ending in that token pair, plus the backoff route and a margin for any
//    positive backoff weights); without bounds, LM log-probs are bounded by 0;
//  * a lower bound on the p-th best score: the p-th best complete path of a cheap beam pass.
// A partial path whose score plus its future bound falls below the lower bound cannot enter
// the top p and is dropped, often before its LM lookup is made.
//
// Memory: an LM lookup is a few dependent probes into KenLM's hash tables, each mostly a
// cache miss. The lookups of one slot are independent, so they are made in one batch in which
// the table buckets of the lookups ahead are prefetched (with the probing model): their
// misses overlap instead of adding up. The results are KenLM's own; only the order in which
// the lookups are made changes.
//
// A context LM (bd_ctx_*, bd_pbest_ctx): n-gram counts over the committed text, interpolated
// with KenLM inside the search, P = lam * P_ctx + (1 - lam) * P_kenlm. Futures then depend on
// the context-LM state too, so buckets are keyed by (KenLM state, context-LM state). What
// concerns KenLM alone stays as it is: the batched, prefetched lookups, the unigram-match
// shortcut, the beam pass's memo of lookups (which also keeps the interpolated terms, reused
// by a bucket of the same pair). The unigram-match bucket of an arc is remembered together
// with its context state (one arc no longer leads to one bucket). The future bounds bound the
// interpolated term, ln(lam + (1 - lam) exp(ub_kenlm)) (P_ctx <= 1): exact, they prune less.
// The context LM's estimates of one context state are computed once per slot, however many
// KenLM states share it. Without a context LM the search is compiled as before, with the same
// operations.
//
// Units: head scores and all outputs are natural-log probabilities; alpha weights the LM part.

#include "lm/enumerate_vocab.hh"
#include "lm/read_arpa.hh"
#include "util/file_piece.hh"
#include "lm/model.hh"
#include "lm/state.hh"
#include "util/string_piece.hh"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

const double kLn10 = 2.302585092994045684017991454684364208;
#if defined(__GNUC__)
#define BD_ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define BD_ALWAYS_INLINE inline
#endif
// KenLM probes issued this many lookups ahead of the one being scored (see Search).
#ifndef BD_PREFETCH_AHEAD
#define BD_PREFETCH_AHEAD 8
#endif
const size_t kPrefetchAhead = BD_PREFETCH_AHEAD;

class CollectVocab : public lm::EnumerateVocab {
 public:
  void Add(lm::WordIndex index, const StringPiece &str) override {
    if (words.size() <= index) words.resize(index + 1);
    words[index].assign(str.data(), str.size());
  }
  std::vector<std::string> words;
};

// A zero-filled array in memory advised for transparent huge pages: random probes into a
// large table then miss the TLB far less often.
template <class T>
class HugeArray {
 public:
  HugeArray() = default;
  HugeArray(const HugeArray &) = delete;
  HugeArray &operator=(const HugeArray &) = delete;
  ~HugeArray() { std::free(data_); }
  void Reset(size_t n) {
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
    const size_t huge = size_t{1} << 21;
    const size_t bytes = (n * sizeof(T) + huge - 1) / huge * huge;
    void *mem = std::aligned_alloc(huge, bytes);
    if (!mem) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(mem, bytes, MADV_HUGEPAGE);  // advice only: fine if it is not taken
#endif
    std::memset(mem, 0, bytes);
    data_ = static_cast<T *>(mem);
    size_ = n;
  }
  void Swap(HugeArray &o) {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
  }
  T &operator[](size_t i) { return data_[i]; }
  const T &operator[](size_t i) const { return data_[i]; }
  size_t size() const { return size_; }
  const T *begin() const { return data_; }
  const T *end() const { return data_ + size_; }

 private:
  T *data_ = nullptr;
  size_t size_ = 0;
};

// Upper bounds on ln P(w | any context ending in c), in log10, keyed by KenLM indices.
struct Bounds {
  struct Entry {
    uint64_t key;  // (c << 32 | w) + 1; 0 = empty
    float val;     // the largest explicit log10 prob of an n-gram ending in (c, w)
  };
  HugeArray<Entry> table;  // open addressing, load <= 1/2; all-zero bytes = empty
  uint64_t mask = 0;
  uint64_t used = 0;
  std::vector<float> uni;  // log10 p(w)
  std::vector<float> bo1;  // log10 backoff of the one-word context (w)
  float margin = 0.f;      // sum over longer contexts of their largest positive backoff

  static uint64_t Key(uint32_t c, uint32_t w) {
    return ((static_cast<uint64_t>(c) << 32) | w) + 1;
  }
  static uint64_t Mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
  }
  void Reserve(uint64_t n) {
    uint64_t cap = 1024;
    while (cap < 2 * n) cap <<= 1;
    HugeArray<Entry> old;
    old.Swap(table);
    table.Reset(cap);
    mask = cap - 1;
    used = 0;
    for (const Entry &e : old)
      if (e.key) *Slot(e.key, true) = e.val;
  }
  float *Slot(uint64_t key, bool insert) {
    uint64_t i = Mix(key) & mask;
    while (true) {
      Entry &e = table[i];
      if (e.key == key) return &e.val;
      if (e.key == 0) {
        if (!insert) return nullptr;
        if (2 * (used + 1) > table.size()) {
          Reserve(2 * (used + 1));
          return Slot(key, true);
        }
        e.key = key;
        e.val = -std::numeric_limits<float>::infinity();
        ++used;
        return &e.val;
      }
      i = (i + 1) & mask;
    }
  }
  // Start fetching the table entry of (c, w) into the cache (the probes of one slot are
  // independent, so their memory latencies overlap).
  void Prefetch(uint32_t c, uint32_t w) const {
    __builtin_prefetch(&table[Mix(Key(c, w)) & mask]);
  }
  // Bound (log10) on ln P(w | state) for a state whose most recent word is c. `ends` tells
  // whether any n-gram of order >= 2 ends in (c, w); when none does, KenLM's longest match
  // for w after such a state is the unigram.
  float After(uint32_t c, uint32_t w, bool &ends) {
    const float backoff_route = uni[w] + (c < bo1.size() ? bo1[c] : 0.f);
    const float *v = Slot(Key(c, w), false);
    ends = v != nullptr;
    return (v ? std::max(*v, backoff_route) : backoff_route) + margin;
  }
};

struct Handle {
  lm::base::Model *model;
  std::vector<std::string> words;
  int order;
  Bounds *bounds = nullptr;
};

struct Hyp {
  double total;  // head + alpha * lm, nats
  double head;   // nats
  double lm;     // nats (unweighted)
  int32_t parent;  // index into the previous slot's hypotheses, -1 for the root
  int32_t arc;     // index of the arc within this slot
};

// An edge into a new bucket: the hypotheses [src_begin, src_end) of a bucket of the previous
// slot (best first) extended by arc `arc`. `first` is the score of the first of them extended,
// so that merging needs no look-up of the source bucket.
struct Edge {
  int32_t src_begin;
  int32_t src_end;
  int32_t arc;
  double delta_total;
  double delta_lm;
  double first;
};

// Partial paths that share one LM state. Their hypotheses are contiguous in the slot's
// hypothesis array, best first: [begin, end). `last_arc` is the arc (in the previous slot) of
// the state's most recent word, -1 when the state has no words (then any arc may lead here).
struct Bucket {
  lm::ngram::State state;
  int32_t begin;
  int32_t end;
  int32_t last_arc;
  int32_t ctx;    // context-LM state (a CtxLM node); always 0 without a context LM
  uint64_t hash;  // lm::ngram::hash_value(state): the KenLM state's alone
};

// The context LM (blockdraft.rescorers.ngram.context, whose docstring defines it): interpolated
// Witten-Bell counts over the raw token ids of the committed text, grown token by token.
//
// Nodes are the distinct token sequences u of length 0..n-1 seen in the text (node 0 is the
// empty one), each with c(u) (the times u is followed by a token), t(u) (distinct followers),
// its suffix link (u without its oldest token) and its length. An edge (u, w) holds c(u w)
// and, when |u w| <= n-1, the node of u w. A search state is the node of the longest suffix
// of the history with c > 0 (at most n-1 tokens).
constexpr int kMaxCtxOrder = 16;

struct CtxLM {
  struct Node {
    uint32_t hist;      // c(u)
    uint32_t distinct;  // t(u)
    int32_t link;       // node of u without its oldest token (-1 for the root)
    int32_t len;        // |u|
  };
  struct Entry {
    uint64_t key;   // (node << 32 | w) + 1; 0 = empty
    uint32_t count;  // c(u w)
    int32_t child;   // node of u w, or -1 (|u w| = n, or not made yet)
  };
  int order;
  std::vector<Node> nodes{Node{0, 0, -1, 0}};
  std::vector<Entry> table = std::vector<Entry>(1024, Entry{0, 0, -1});
  uint64_t mask = 1023;
  uint64_t used = 0;
  std::vector<int32_t> tail{0}, tail_next;  // tail[L]: node of the text's last L tokens
  int32_t tail_state = 0;                   // the state after the whole text

  explicit CtxLM(int n) : order(n) {}

  static uint64_t Key(int32_t node, uint32_t w) {
    return ((static_cast<uint64_t>(node) << 32) | w) + 1;
  }
  void Prefetch(int32_t node, uint32_t w) const {
    __builtin_prefetch(&table[Bounds::Mix(Key(node, w)) & mask]);
  }
  const Entry *Find(int32_t node, uint32_t w) const {
    const uint64_t key = Key(node, w);
    uint64_t i = Bounds::Mix(key) & mask;
    while (true) {
      const Entry &e = table[i];
      if (e.key == key) return &e;
      if (e.key == 0) return nullptr;
      i = (i + 1) & mask;
    }
  }
  // The entry of (node, w), inserted (count 0) when absent; an index: inserting may grow.
  size_t Insert(int32_t node, uint32_t w) {
    if (2 * (used + 1) > table.size()) {
      std::vector<Entry> old(table.size() * 2, Entry{0, 0, -1});
      old.swap(table);
      mask = table.size() - 1;
      for (const Entry &e : old) {
        if (!e.key) continue;
        uint64_t i = Bounds::Mix(e.key) & mask;
        while (table[i].key) i = (i + 1) & mask;
        table[i] = e;
      }
    }
    const uint64_t key = Key(node, w);
    uint64_t i = Bounds::Mix(key) & mask;
    while (table[i].key && table[i].key != key) i = (i + 1) & mask;
    if (!table[i].key) {
      table[i] = Entry{key, 0, -1};
      ++used;
    }
    return i;
  }
  // Append one token: the n-grams (orders 1..n) ending at it. O(n) table operations.
  void Extend(uint32_t w) {
    const int top = static_cast<int>(tail.size()) - 1;  // min(n - 1, tokens so far)
    tail_next.assign(1, 0);
    for (int L = 0; L <= top; ++L) {
      const int32_t u = tail[L];
      const size_t at = Insert(u, w);
      if (table[at].count++ == 0) ++nodes[u].distinct;
      ++nodes[u].hist;
      if (L + 1 <= order - 1) {
        if (table[at].child < 0) {
          table[at].child = static_cast<int32_t>(nodes.size());
          nodes.push_back(Node{0, 0, tail_next[L], L + 1});
        }
        tail_next.push_back(table[at].child);
      }
    }
    tail.swap(tail_next);
    tail_state = 0;
    for (int L = static_cast<int>(tail.size()) - 1; L >= 1; --L)
      if (nodes[tail[L]].hist > 0) {
        tail_state = tail[L];
        break;
      }
  }
  // The suffixes of state s, shortest first: chain[1..len] (chain[len] = s), with their
  // c(u) and t(u). Returns len.
  int Chain(int32_t s, int32_t *chain, uint32_t *hist, uint32_t *distinct) const {
    const int len = nodes[s].len;
    for (int j = len, u = s; j >= 1; --j, u = nodes[u].link) {
      chain[j] = u;
      hist[j] = nodes[u].hist;
      distinct[j] = nodes[u].distinct;
    }
    return len;
  }
  // Whether the node an entry leads to (u w, |u w| = L) is a state, i.e. c(u w) > 0: u w
  // occurs other than as the text's suffix (no look-up of the node itself).
  bool Followed(const Entry &e, int L) const {
    return e.child >= 0 && (e.count > 1 || e.child != tail[L]);
  }
  // P_ctx(w | state s) and the state after w ...
  void Step(int32_t s, uint32_t w, double &p, int32_t &next) const {
    int32_t chain[kMaxCtxOrder];
    uint32_t hist[kMaxCtxOrder], distinct[kMaxCtxOrder];
    const int len = Chain(s, chain, hist, distinct);
    StepFrom(chain, hist, distinct, len, Find(0, w), w, p, next);
  }
  // ... given the state's chain and w's entry at the root (null when w is not in the text).
  // The same floating-point operations, in the same order, as ContextLM.prob in Python: from
  // the unigram ML estimate up the suffixes of s.
  void StepFrom(const int32_t *chain, const uint32_t *hist, const uint32_t *distinct, int len,
                const Entry *e, uint32_t w, double &p, int32_t &next) const {
    next = 0;
    if (!e) {  // w is not in the text: no n-gram ends in it
      p = 0.0;
      return;
    }
    p = static_cast<double>(e->count) / static_cast<double>(nodes[0].hist);
    if (Followed(*e, 1)) next = e->child;
    for (int j = 1; j <= len; ++j) {
      if (hist[j] == 0) continue;  // c(u) = 0: backs off (never so for a state)
      // u w occurs only if its suffix does: after a miss, no longer suffix is looked up.
      e = e ? Find(chain[j], w) : nullptr;
      double c_uw = 0.0;
      if (e) {
        c_uw = static_cast<double>(e->count);
        if (Followed(*e, j + 1)) next = e->child;
      }
      p = (c_uw + static_cast<double>(distinct[j]) * p) /
          (static_cast<double>(hist[j]) + static_cast<double>(distinct[j]));
    }
  }
};

// The context LM's part of one search: P = lam * P_ctx + (1 - lam) * P_kenlm.
struct CtxArgs {
  const CtxLM *lm;
  const uint32_t *raw;  // [h*k] raw token ids of the lattice's arcs
  double lam;
  double one_m_lam;     // 1 - lam
  double log1m_lam;     // log1p(-lam): the LM term where P_ctx = 0 is this plus ln P_kenlm
};

// ln(lam * P_ctx + (1 - lam) * exp(kenlm_ln)): the same operations as interpolate_one in
// Python (blockdraft.rescorers.ngram.context).
BD_ALWAYS_INLINE double Interpolate(const CtxArgs &cx, double pc, double kenlm_ln) {
  if (pc == 0.0) return cx.log1m_lam + kenlm_ln;
  return std::log(cx.lam * pc + cx.one_m_lam * std::exp(kenlm_ln));
}

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
    // A binary is read into (transparent huge page) memory rather than mapped from the file:
    // the search's random probes into its tables then miss the TLB far less often.
    config.load_method = util::READ;
    lm::base::Model *model = lm::ngram::LoadVirtual(path, config);
    Handle *h = new Handle{model, std::move(vocab.words), static_cast<int>(model->Order())};
    return h;
  } catch (const std::exception &e) {
    SetError(err, errlen, e.what());
    return nullptr;
  }
}

// KenLM's probing binary of an ARPA file, as `build_binary ARPA OUT` writes it (the same
// KenLM code and defaults: probing multiplier 1.5, written after loading). Returns 0, or -1
// with the reason in err.
int bd_write_binary(const char *arpa_path, const char *out_path, char *err, int errlen) {
  try {
    lm::ngram::Config config;
    config.messages = nullptr;
    config.arpa_complain = lm::ngram::Config::NONE;
    config.write_mmap = out_path;
    config.write_method = lm::ngram::Config::WRITE_AFTER;
    lm::ngram::ProbingModel model(arpa_path, config);
    return 0;
  } catch (const std::exception &e) {
    SetError(err, errlen, e.what());
    return -1;
  }
}

void bd_free(void *handle) {
  Handle *h = static_cast<Handle *>(handle);
  if (!h) return;
  delete h->model;
  delete h->bounds;
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

// Build the bigram-keyed upper bounds from the ARPA file the model was loaded from (or the
// ARPA of the same LM when the model is a binary). Returns the number of keys, or -1 on error.
int64_t bd_build_bounds(void *handle, const char *arpa_path, char *err, int errlen) {
  Handle *h = static_cast<Handle *>(handle);
  try {
    util::FilePiece in(arpa_path);
    std::vector<uint64_t> counts;
    lm::ReadARPACounts(in, counts);
    if (counts.empty()) throw std::runtime_error("no n-gram counts in the ARPA header");
    if (static_cast<int>(counts.size()) != h->order)
      throw std::runtime_error("the ARPA file's order differs from the loaded model's");
    const lm::base::Vocabulary &vocab = h->model->BaseVocabulary();
    std::unique_ptr<Bounds> b(new Bounds);
    const size_t vsize = h->words.size();
    b->uni.assign(vsize, 0.f);
    b->bo1.assign(vsize, 0.f);
    // Every n-gram's last pair is normally a bigram: size for those, grow if not.
    b->Reserve(counts.size() > 1 ? counts[1] : 1);
    std::vector<float> max_pos_bo(counts.size() + 1, 0.f);
    std::vector<uint32_t> ids(counts.size());
    for (size_t n = 1; n <= counts.size(); ++n) {
      lm::ReadNGramHeader(in, n);
      for (uint64_t i = 0; i < counts[n - 1]; ++i) {
        float prob = in.ReadFloat();
        for (size_t j = 0; j < n; ++j) ids[j] = vocab.Index(in.ReadDelimited());
        float bo = 0.f;
        // An optional backoff follows on the same line.
        char c = in.get();
        if (c == '\t' || c == ' ') {
          bo = in.ReadFloat();
          c = in.get();
          while (c == ' ' || c == '\t' || c == '\r') c = in.get();
        }
        if (c != '\n') throw std::runtime_error("malformed n-gram line in the ARPA file");
        if (n < counts.size() && bo > max_pos_bo[n]) max_pos_bo[n] = bo;
        if (n == 1) {
          b->uni[ids[0]] = prob;
          b->bo1[ids[0]] = bo;
        } else {
          float *v = b->Slot(Bounds::Key(ids[n - 2], ids[n - 1]), true);
          if (prob > *v) *v = prob;
        }
      }
    }
    // Contexts of two or more words may add a positive backoff on top of a shorter n-gram.
    for (size_t n = 2; n < counts.size(); ++n) b->margin += max_pos_bo[n];
    b->margin += 1e-5f;  // float rounding of the sums, log10
    int64_t n_keys = static_cast<int64_t>(b->used);
    delete h->bounds;
    h->bounds = b.release();
    return n_keys;
  } catch (const std::exception &e) {
    SetError(err, errlen, e.what());
    return -1;
  }
}

int bd_has_bounds(void *handle) { return static_cast<Handle *>(handle)->bounds != nullptr; }

}  // extern "C"

// With a context LM, a bound r (nats) of ln P_kenlm becomes the bound
// f(r) = ln(lam + (1 - lam) exp(r)) of the interpolated term (P_ctx <= 1). f is convex, so on
// a grid of r its chords lie above it: a table of f on the grid, linearly interpolated (plus a
// rounding margin), bounds it with no exp or log per bound. Built once per lam and thread.
constexpr double kWrapLo = -32.0;   // nats; below it f is computed directly
constexpr int kWrapPerNat = 16;
constexpr int kWrapSize = 32 * kWrapPerNat + 1;
struct WrapTable {
  double lam = -1.0;
  std::vector<double> f;
  void Build(const CtxArgs &cx) {
    if (lam == cx.lam) return;
    f.resize(kWrapSize);
    for (int j = 0; j < kWrapSize; ++j)
      f[j] = std::log(cx.lam + cx.one_m_lam * std::exp(kWrapLo + double(j) / kWrapPerNat));
    lam = cx.lam;
  }
  // An upper bound of f(r).
  double Bound(const CtxArgs &cx, double r) const {
    if (r < kWrapLo || r > 0.0) return std::log(cx.lam + cx.one_m_lam * std::exp(r));
    const double x = (r - kWrapLo) * kWrapPerNat;
    const int j = std::min(static_cast<int>(x), kWrapSize - 2);
    return f[j] + (x - j) * (f[j + 1] - f[j]) + 1e-12;
  }
};

// One search pass over the lattice. With beam > 0 only the `beam` most promising buckets
// survive each slot: a cheap pass whose complete paths give a lower bound on the p-th best
// score. With lower_bound > -inf, partial paths that cannot reach it are dropped (see top).
struct Workspace {
  std::vector<std::vector<Hyp>> slots;
  std::vector<Bucket> cur, next;
  std::vector<Edge> edges, sorted_edges;
  std::vector<int32_t> edge_to, offsets, fill;
  std::vector<int32_t> table;  // open addressing: bucket index or -1
  struct Cand {
    double score;
    int32_t edge;
    int32_t pos;
    bool operator<(const Cand &o) const { return score < o.score; }
  };
  std::vector<Cand> heap;
  std::vector<std::pair<double, int32_t>> order;
  std::vector<Hyp> root{Hyp{0.0, 0.0, 0.0, -1, -1}};
  // Bounds for the current lattice, nats:
  //   ub[i][x * k + a]: alpha * bound of the LM term of arc a of slot i after arc x of slot
  //                      i-1 (slot 0: x = 0 is the start state)
  //   any[i][a]:        the same when the previous state has no words
  //   future[i][a]:     the best score slots i+1.. can add after arc a of slot i
  std::vector<std::vector<double>> ub, any, future;
  //   ends[i][x * k + a]: whether an n-gram of order >= 2 ends in (word of x, word of a); when
  //                       not, the lookup needs no KenLM probe (see Search); all 1 without
  //                       bounds
  std::vector<std::vector<uint8_t>> ends;
  // LM lookups made by the beam pass, reused by the main pass: per slot, the states the beam
  // pass expanded and, for each, every arc's log10 prob and next state.
  std::vector<std::vector<lm::ngram::State>> memo_in, memo_out;
  std::vector<std::vector<float>> memo_prob;
  std::vector<float> uni_prob;              // per arc of the current slot: unigram match
  std::vector<lm::ngram::State> uni_out;
  std::vector<int32_t> uni_bucket;          // per arc: the bucket of its unigram-match state
  std::vector<std::vector<uint64_t>> memo_hashes;  // per slot: the memo states' hashes
  // With a context LM, also per memo entry its bucket's context state and, per arc, the
  // interpolated LM term and next context state: reused by a bucket of the same pair.
  std::vector<std::vector<int32_t>> memo_ctx, memo_ctx_next;
  std::vector<std::vector<double>> memo_lm;
  std::vector<uint8_t> memo_same;           // per expanded bucket: its memo entry has its pair
  std::vector<uint64_t> uni_hash;           // kCtx, per arc: hash of its unigram-match state
  std::vector<int32_t> uni_bucket_ctx;      // kCtx, per arc: the context state of uni_bucket
  WrapTable wrap;                           // kCtx: the bounds' table (see WrapTable)
  std::vector<Edge> best_edge;              // per new bucket, its best incoming edge
  std::vector<size_t> table_used;           // slots of `table` filled for this slot
  // The KenLM probes of one slot, in the order the main loop consumes them: the source
  // bucket, the word, and (after the batched probing) the log10 prob and next state.
  std::vector<int32_t> memo_of;             // per expanded bucket: its memo entry, or -1
  std::vector<int32_t> probe_bucket;
  std::vector<uint32_t> probe_word;
  std::vector<float> probe_prob;
  std::vector<lm::ngram::State> probe_out;
  // p > 1: per slot, every edge grouped by target bucket: edges [off[t], off[t+1]) enter t.
  std::vector<std::vector<Edge>> edges_by_slot;
  std::vector<std::vector<int32_t>> offsets_by_slot;
  // The lazy k-best enumeration (Jimenez & Marzal's recursive enumeration algorithm): per
  // slot and bucket, the paths found so far, best first, and the candidate heap.
  struct PathRef {
    double total, head, lm;
    int32_t edge;  // into edges_by_slot[slot]
    int32_t rank;  // of the path in the edge's source bucket
  };
  struct LazyNode {
    std::vector<PathRef> found;
    std::vector<Cand> heap;
    bool started = false;
  };
  std::vector<std::vector<LazyNode>> lazy;
  // With a context LM: per slot, each context state met gets a row of every arc's P_ctx and
  // next context state, computed once however many buckets (KenLM states) share the state.
  std::vector<int32_t> ctx_row_of;  // per CtxLM node: its row for the current slot, or -1
  std::vector<int32_t> ctx_rows;    // the nodes given a row this slot
  std::vector<double> ctx_p;        // [row * k + a]
  std::vector<int32_t> ctx_next;    // [row * k + a]; kCtxTodo until computed (on first use)
  std::vector<int32_t> ctx_chain;   // [row * kMaxCtxOrder + j]: the row's state's suffixes
  std::vector<uint32_t> ctx_hist, ctx_distinct;  // ... and their c(u), t(u)
  std::vector<int32_t> ctx_len;     // [row]: its length
  std::vector<const CtxLM::Entry *> ctx_root;  // per arc of the slot: its token's root entry
  std::vector<uint32_t> ctx_word;                // ... and its raw token id
};

// The probing model's hash tables, read for prefetching only: where KenLM will look for the
// n-grams of a lookup, so that the memory accesses of many independent lookups overlap. An
// explicit instantiation may name private members ([temp.spec.general]); nothing is written
// and a wrong address would only cost speed, never change a result.
using ProbingSearch = lm::ngram::detail::HashedSearch<lm::ngram::BackoffValue>;
using ProbingBase = lm::ngram::detail::GenericModel<ProbingSearch, lm::ngram::ProbingVocabulary>;
using MiddleTable =
    util::ProbingHashTable<lm::ngram::BackoffValue::ProbingEntry, util::IdentityHash>;
using LongestTable = util::ProbingHashTable<lm::ngram::detail::ProbEntry, util::IdentityHash>;
template <class Tag, typename Tag::type Member>
struct ExposeMember {
  friend typename Tag::type Get(Tag) { return Member; }
};
struct SearchTag {
  typedef ProbingSearch ProbingBase::*type;
  friend type Get(SearchTag);
};
struct MiddleTag {
  typedef std::vector<MiddleTable> ProbingSearch::*type;
  friend type Get(MiddleTag);
};
struct LongestTag {
  typedef LongestTable ProbingSearch::*type;
  friend type Get(LongestTag);
};
template struct ExposeMember<SearchTag, &ProbingBase::search_>;
template struct ExposeMember<MiddleTag, &ProbingSearch::middle_>;
template struct ExposeMember<LongestTag, &ProbingSearch::longest_>;

// LM lookups through the virtual interface (any KenLM model type) ...
struct VirtualScorer {
  const lm::base::Model *model;
  float operator()(const lm::ngram::State &in, uint32_t w, lm::ngram::State &out) const {
    return model->BaseScore(&in, w, &out);
  }
  void Prefetch(const lm::ngram::State &, uint32_t) const {}
};
// ... or, for the common probing model, direct calls the compiler can inline.
struct ProbingScorer {
  explicit ProbingScorer(const lm::ngram::ProbingModel *m) : model(m) {
    const ProbingSearch &search = static_cast<const ProbingBase &>(*m).*Get(SearchTag());
    middle = &(search.*Get(MiddleTag()));
    longest = &(search.*Get(LongestTag()));
  }
  float operator()(const lm::ngram::State &in, uint32_t w, lm::ngram::State &out) const {
    return model->FullScore(in, w, out).prob;
  }
  // The first bucket of every n-gram KenLM may probe when scoring w after `in`: (c1, w),
  // (c2, c1, w), ... hashed as KenLM hashes them (the unigram is a small dense array).
  // Always inlined: a prefetch is no side effect to the compiler, which otherwise finds this
  // function pure and drops every call to it.
  BD_ALWAYS_INLINE void Prefetch(const lm::ngram::State &in, uint32_t w) const {
    uint64_t node = w;
    for (unsigned char j = 0; j < in.length; ++j) {
      node = lm::ngram::detail::CombineWordHash(node, in.words[j]);
      if (j < middle->size())
        __builtin_prefetch(&*(*middle)[j].Ideal(node));
      else
        __builtin_prefetch(&*longest->Ideal(node));
    }
  }
  const lm::ngram::ProbingModel *model;
  const std::vector<MiddleTable> *middle;
  const LongestTable *longest;
};

// Fill ws.ub / ws.any / ws.future for one lattice (see Workspace). With a context LM (cx),
// the bounds are those of the interpolated term (see WrapTable): still exact, they only
// prune less.
static void ComputeBounds(Handle *hd, Workspace &ws, const lm::ngram::State &start, int h,
                          int k, const uint32_t *words, const int32_t *counts,
                          const double *head, double alpha, bool penalize_unk, double unk_ln,
                          const CtxArgs *cx) {
  Bounds *b = hd->bounds;
  const double scale = alpha * kLn10;
  if (cx) ws.wrap.Build(*cx);
  auto wrap = [&](double r) { return alpha * ws.wrap.Bound(*cx, r); };
  ws.ub.resize(h);
  ws.any.resize(h);
  ws.future.resize(h);
  ws.ends.resize(h);
  for (int i = 0; i < h; ++i) {
    const int na = counts[i];
    const int np = i == 0 ? 1 : counts[i - 1];
    ws.ub[i].assign(static_cast<size_t>(np) * k, 0.0);
    ws.ends[i].assign(static_cast<size_t>(np) * k, 1);
    ws.any[i].assign(k, 0.0);
    if (b && (i > 0 || start.length > 0)) {
      for (int a = 0; a < na; ++a)
        for (int x = 0; x < np; ++x)
          b->Prefetch(i == 0 ? start.words[0] : words[(i - 1) * k + x], words[i * k + a]);
    }
    for (int a = 0; a < na; ++a) {
      const uint32_t w = words[i * k + a];
      if (penalize_unk && w == 0) {
        const double v = cx ? wrap(unk_ln) : alpha * unk_ln;
        for (int x = 0; x < np; ++x) ws.ub[i][x * k + a] = v;
        ws.any[i][a] = v;
        continue;
      }
      if (!b) continue;  // LM log-probs are <= 0: the zero bound
      ws.any[i][a] = cx ? wrap(kLn10 * std::min(0.f, b->uni[w]))
                        : scale * std::min(0.f, b->uni[w]);
      for (int x = 0; x < np; ++x) {
        uint32_t prev_word;
        if (i == 0) {
          if (start.length == 0) {
            ws.ub[i][a] = ws.any[i][a];
            continue;
          }
          prev_word = start.words[0];
        } else {
          prev_word = words[(i - 1) * k + x];
        }
        bool ends = true;
        const float bound = std::min(0.f, b->After(prev_word, w, ends));
        ws.ub[i][x * k + a] = cx ? wrap(kLn10 * bound) : scale * bound;
        ws.ends[i][x * k + a] = ends;
      }
    }
  }
  // Backward pass: future[i][x] = max_a head[i+1][a] + ub[i+1][x][a] + future[i+1][a], also
  // maximised with the any-state bound (the state after arc x may have lost its words).
  ws.future[h - 1].assign(k, 0.0);
  for (int i = h - 2; i >= 0; --i) {
    ws.future[i].assign(k, -std::numeric_limits<double>::infinity());
    const int na = counts[i + 1];
    for (int x = 0; x < counts[i]; ++x) {
      double best = -std::numeric_limits<double>::infinity();
      for (int a = 0; a < na; ++a) {
        const double tail = head[(i + 1) * k + a] + ws.future[i + 1][a];
        const double lmb = std::max(ws.ub[i + 1][x * k + a], ws.any[i + 1][a]);
        best = std::max(best, tail + lmb);
      }
      ws.future[i][x] = best;
    }
  }
}

// The row of ws.ctx_p / ws.ctx_next for context state s in the current slot, made on first
// use; its entries are computed on first use too (CtxArc): arcs pruned before their LM
// lookup never need them.
constexpr int32_t kCtxTodo = -2;
static int32_t CtxRow(Workspace &ws, const CtxArgs &cx, int32_t s, int k) {
  int32_t &row = ws.ctx_row_of[s];
  if (row >= 0) return row;
  row = static_cast<int32_t>(ws.ctx_rows.size());
  ws.ctx_rows.push_back(s);
  ws.ctx_p.resize(ws.ctx_rows.size() * k);
  ws.ctx_next.resize(ws.ctx_rows.size() * k);
  std::fill(ws.ctx_next.end() - k, ws.ctx_next.end(), kCtxTodo);
  const size_t c = static_cast<size_t>(row) * kMaxCtxOrder;
  ws.ctx_chain.resize(c + kMaxCtxOrder);
  ws.ctx_hist.resize(c + kMaxCtxOrder);
  ws.ctx_distinct.resize(c + kMaxCtxOrder);
  const int len = cx.lm->Chain(s, &ws.ctx_chain[c], &ws.ctx_hist[c], &ws.ctx_distinct[c]);
  ws.ctx_len.push_back(len);
  // The first look-up of each arc of the text is (shortest suffix, token): fetch them ahead.
  if (len > 0)
    for (size_t a = 0; a < ws.ctx_root.size(); ++a)
      if (ws.ctx_root[a]) cx.lm->Prefetch(ws.ctx_chain[c + 1], ws.ctx_word[a]);
  return row;
}

// Entry `at` = row * k + a of the current slot's rows: P_ctx and the next context state.
BD_ALWAYS_INLINE void CtxArc(Workspace &ws, const CtxArgs &cx, size_t at, int32_t row, int a,
                             uint32_t w) {
  if (ws.ctx_next[at] != kCtxTodo) return;
  const size_t c = static_cast<size_t>(row) * kMaxCtxOrder;
  cx.lm->StepFrom(&ws.ctx_chain[c], &ws.ctx_hist[c], &ws.ctx_distinct[c], ws.ctx_len[row],
                  ws.ctx_root[a], w, ws.ctx_p[at], ws.ctx_next[at]);
}

// The bucket table's key of a (KenLM state, context state) pair.
BD_ALWAYS_INLINE uint64_t PairHash(uint64_t kenlm_hash, int32_t ctx) {
  return kenlm_hash ^ Bounds::Mix(static_cast<uint64_t>(ctx) + 0x9e3779b97f4a7c15ULL);
}

// kCtx: buckets are keyed by (KenLM state, context state) and the LM term is interpolated
// with the context LM (cx); without it the search is the plain KenLM one (cx unused).
template <bool kCtx, class Scorer>
static int Search(const Scorer &score_fn, Workspace &ws, const lm::ngram::State &start, int h,
                  int k, const uint32_t *words, const int32_t *counts, const double *head,
                  double alpha, bool penalize_unk, double unk_ln, int p, int beam,
                  double lower_bound, int64_t *stats, const CtxArgs &cx) {
  ws.slots.resize(h);
  ws.edges_by_slot.resize(h);
  ws.offsets_by_slot.resize(h);
  ws.cur.clear();
  ws.cur.push_back(Bucket{start, 0, 1, start.length ? 0 : -1, kCtx ? cx.lm->tail_state : 0,
                          lm::ngram::hash_value(start)});
  if (kCtx && ws.ctx_row_of.size() < cx.lm->nodes.size())
    ws.ctx_row_of.resize(cx.lm->nodes.size(), -1);  // every entry is -1 between slots
  const bool record = beam > 0;  // the beam pass records its lookups for the main pass
  const std::vector<Hyp> *prev = &ws.root;
  const bool bounded = lower_bound > -std::numeric_limits<double>::infinity();
  const double neg_inf = -std::numeric_limits<double>::infinity();

  lm::ngram::State null_state;
  null_state.length = 0;
  for (int i = 0; i < h; ++i) {
    const int n_arcs = counts[i];
    // Each arc's score and state after a context-free (null) state: KenLM's unigram match.
    ws.uni_prob.resize(k);
    ws.uni_out.resize(k);
    ws.uni_bucket.assign(k, -1);
    for (int a = 0; a < n_arcs; ++a)
      ws.uni_prob[a] = score_fn(null_state, words[i * k + a], ws.uni_out[a]);
    if (kCtx) {  // each arc's token at the context LM's root: one probe per arc and slot
      ws.ctx_root.resize(n_arcs);
      ws.ctx_word.assign(cx.raw + i * k, cx.raw + i * k + n_arcs);
      ws.uni_hash.resize(k);
      ws.uni_bucket_ctx.assign(k, -1);
      for (int a = 0; a < n_arcs; ++a) cx.lm->Prefetch(0, ws.ctx_word[a]);
      for (int a = 0; a < n_arcs; ++a) {
        ws.ctx_root[a] = cx.lm->Find(0, ws.ctx_word[a]);
        ws.uni_hash[a] = lm::ngram::hash_value(ws.uni_out[a]);
      }
    }
    const uint8_t *ends = ws.ends[i].data();
    const double *fut = ws.future[i].data();
    const double *ub = ws.ub[i].data();
    const double *any = ws.any[i].data();
    ws.next.clear();
    ws.edges.clear();
    ws.edge_to.clear();
    ws.best_edge.clear();
    size_t cap = 64;
    while (cap < 2 * (ws.cur.size() * n_arcs + 1)) cap <<= 1;
    if (ws.table.size() < cap) ws.table.assign(cap, -1);  // else clean: see the end of slot
    int64_t lookups = 0;
    ws.order.clear();
    for (size_t b = 0; b < ws.cur.size(); ++b)
      ws.order.emplace_back((*prev)[ws.cur[b].begin].total, static_cast<int32_t>(b));
    if (beam > 0 && static_cast<int>(ws.order.size()) > beam) {
      std::partial_sort(ws.order.begin(), ws.order.begin() + beam, ws.order.end(),
                        [](const auto &a, const auto &b) { return a.first > b.first; });
      ws.order.resize(beam);
    }
    // Lookups the beam pass already made from a bucket's state, if any (hashes first).
    const size_t n_order = ws.order.size();
    ws.memo_of.assign(n_order, -1);
    if (kCtx) ws.memo_same.assign(n_order, 0);
    if (!record) {
      const std::vector<uint64_t> &hashes = ws.memo_hashes[i];
      const std::vector<lm::ngram::State> &seen = ws.memo_in[i];
      for (size_t o = 0; o < n_order; ++o) {
        const Bucket &bk = ws.cur[ws.order[o].second];
        for (size_t m = 0; m < seen.size(); ++m)
          if (hashes[m] == bk.hash && seen[m] == bk.state) {
            // With a context LM, an entry of the same pair is preferred (see memo_lm).
            if (ws.memo_of[o] < 0) ws.memo_of[o] = static_cast<int32_t>(m);
            if (!kCtx) break;
            if (ws.memo_ctx[i][m] == bk.ctx) {
              ws.memo_of[o] = static_cast<int32_t>(m);
              ws.memo_same[o] = 1;
              break;
            }
          }
      }
    }
    // The KenLM probes of this slot, in the order the loop below consumes them (the same
    // tests decide), made in one batch whose memory accesses are prefetched ahead: the
    // lookups are independent, and each probe is mostly a cache miss into the LM's tables.
    ws.probe_bucket.clear();
    ws.probe_word.clear();
    for (size_t o = 0; o < n_order; ++o) {
      if (ws.memo_of[o] >= 0) continue;
      const int32_t b = ws.order[o].second;
      const int32_t x = ws.cur[b].last_arc;
      if (x < 0) continue;  // a state without words: unigram matches only
      const double best_in = ws.order[o].first;
      const double *row = ub + static_cast<size_t>(x) * k;
      const uint8_t *ends_row = ends + static_cast<size_t>(x) * k;
      for (int a = 0; a < n_arcs; ++a) {
        if (!ends_row[a]) continue;
        if (bounded && best_in + head[i * k + a] + row[a] + fut[a] < lower_bound) continue;
        ws.probe_bucket.push_back(b);
        ws.probe_word.push_back(words[i * k + a]);
      }
    }
    const size_t n_probe = ws.probe_bucket.size();
    ws.probe_prob.resize(n_probe);
    ws.probe_out.resize(n_probe);
    {
      const size_t ahead = std::min(kPrefetchAhead, n_probe);
      for (size_t j = 0; j < ahead; ++j)
        score_fn.Prefetch(ws.cur[ws.probe_bucket[j]].state, ws.probe_word[j]);
      for (size_t j = 0; j < n_probe; ++j) {
        if (kPrefetchAhead && j + kPrefetchAhead < n_probe)
          score_fn.Prefetch(ws.cur[ws.probe_bucket[j + kPrefetchAhead]].state,
                            ws.probe_word[j + kPrefetchAhead]);
        ws.probe_prob[j] =
            score_fn(ws.cur[ws.probe_bucket[j]].state, ws.probe_word[j], ws.probe_out[j]);
      }
    }
    size_t next_probe = 0;
    for (size_t o = 0; o < n_order; ++o) {
      const int32_t b = ws.order[o].second;
      const double best_in = ws.order[o].first;
      const int32_t x = ws.cur[b].last_arc;
      const double *row = x >= 0 ? ub + static_cast<size_t>(x) * k : any;
      const uint8_t *ends_row = x >= 0 ? ends + static_cast<size_t>(x) * k : nullptr;
      const lm::ngram::State &in_state = ws.cur[b].state;
      const int memo = ws.memo_of[o];
      const int32_t ctx_row = kCtx ? CtxRow(ws, cx, ws.cur[b].ctx, k) : 0;
      const size_t ctx_at = static_cast<size_t>(ctx_row) * k;
      const bool memo_same = kCtx && memo >= 0 && ws.memo_same[o];
      if (record) {
        ws.memo_in[i].push_back(in_state);
        ws.memo_hashes[i].push_back(ws.cur[b].hash);
        ws.memo_prob[i].resize(ws.memo_in[i].size() * k);
        ws.memo_out[i].resize(ws.memo_in[i].size() * k);
        if (kCtx) {
          ws.memo_ctx[i].push_back(ws.cur[b].ctx);
          ws.memo_lm[i].resize(ws.memo_in[i].size() * k);
          ws.memo_ctx_next[i].resize(ws.memo_in[i].size() * k);
        }
      }
      for (int a = 0; a < n_arcs; ++a) {
        const double hs = head[i * k + a];
        if (bounded && best_in + hs + row[a] + fut[a] < lower_bound) continue;
        const uint32_t w = words[i * k + a];
        lm::ngram::State out_state;
        float prob;
        bool unigram_match = false;
        if (memo >= 0) {
          prob = ws.memo_prob[i][memo * k + a];
          out_state = ws.memo_out[i][memo * k + a];
        } else if (ends_row == nullptr || !ends_row[a]) {
          // No n-gram of order >= 2 ends in (the state's last word, w), or the state has no
          // words: KenLM matches the unigram, adds the state's backoffs in order, and leaves
          // the unigram's state. The same float operations, without the probes.
          prob = ws.uni_prob[a];
          for (unsigned char j = 0; j < in_state.length; ++j) prob += in_state.backoff[j];
          unigram_match = true;
        } else {
          prob = ws.probe_prob[next_probe];
          out_state = ws.probe_out[next_probe];
          ++next_probe;
          ++lookups;
        }
        if (record) {
          const size_t at = (ws.memo_in[i].size() - 1) * k + a;
          ws.memo_prob[i][at] = prob;
          ws.memo_out[i][at] = unigram_match ? ws.uni_out[a] : out_state;
        }
        double lm_ln = static_cast<double>(prob) * kLn10;
        if (penalize_unk && w == 0) lm_ln = unk_ln;
        int32_t out_ctx = 0;
        double delta;
        if (kCtx) {
          if (memo_same) {  // the beam pass scored this very pair and arc
            lm_ln = ws.memo_lm[i][memo * k + a];
            out_ctx = ws.memo_ctx_next[i][memo * k + a];
          } else {
            CtxArc(ws, cx, ctx_at + a, ctx_row, a, cx.raw[i * k + a]);
            out_ctx = ws.ctx_next[ctx_at + a];
            lm_ln = Interpolate(cx, ws.ctx_p[ctx_at + a], lm_ln);  // -inf: lam = 1, P_ctx = 0
          }
          if (record) {
            const size_t at = (ws.memo_in[i].size() - 1) * k + a;
            ws.memo_lm[i][at] = lm_ln;
            ws.memo_ctx_next[i][at] = out_ctx;
          }
          delta = alpha != 0.0 ? hs + alpha * lm_ln : hs;  // never 0 * -inf
        } else {
          delta = hs + alpha * lm_ln;
        }
        if (bounded && best_in + delta + fut[a] < lower_bound) continue;
        // Every unigram match of an arc leads to one KenLM state: its bucket is remembered
        // (with a context LM, for the last context state it was met with).
        int32_t nb = -1;
        if (unigram_match && (!kCtx || ws.uni_bucket_ctx[a] == out_ctx)) nb = ws.uni_bucket[a];
        if (nb < 0) {
          if (unigram_match) out_state = ws.uni_out[a];
          const uint64_t hash =
              kCtx && unigram_match ? ws.uni_hash[a] : lm::ngram::hash_value(out_state);
          size_t slot = (kCtx ? PairHash(hash, out_ctx) : hash) & (cap - 1);
          while (true) {
            const int32_t t = ws.table[slot];
            if (t < 0) {
              nb = static_cast<int32_t>(ws.next.size());
              ws.table[slot] = nb;
              ws.table_used.push_back(slot);
              ws.next.push_back(
                  Bucket{out_state, 0, 0, out_state.length ? a : -1, out_ctx, hash});
              break;
            }
            if (ws.next[t].hash == hash && (!kCtx || ws.next[t].ctx == out_ctx) &&
                ws.next[t].state == out_state) {
              nb = t;
              break;
            }
            slot = (slot + 1) & (cap - 1);
          }
          if (unigram_match) {
            ws.uni_bucket[a] = nb;
            if (kCtx) ws.uni_bucket_ctx[a] = out_ctx;
          }
        }
        const Edge edge{ws.cur[b].begin, ws.cur[b].end, a, delta, lm_ln, best_in + delta};
        // Each bucket's best partial path comes from its best edge (the first of equals); for
        // p > 1 every edge is kept too, for the lazy k-best enumeration at the end. With a
        // context LM an edge may score -inf (lam = 1, a token not in the text): the first
        // edge is taken all the same.
        if (static_cast<size_t>(nb) >= ws.best_edge.size())
          ws.best_edge.resize(nb + 1, Edge{0, 0, -1, 0.0, 0.0, neg_inf});
        if (edge.first > ws.best_edge[nb].first || (kCtx && ws.best_edge[nb].arc < 0))
          ws.best_edge[nb] = edge;
        if (p > 1) {
          ws.edges.push_back(edge);
          ws.edge_to.push_back(nb);
        }
      }
    }
    // Leave the bucket table empty for the next slot (cheaper than clearing all of it).
    for (size_t slot : ws.table_used) ws.table[slot] = -1;
    ws.table_used.clear();
    if (kCtx) {
      for (int32_t node : ws.ctx_rows) ws.ctx_row_of[node] = -1;
      ws.ctx_rows.clear();
      ws.ctx_len.clear();
    }
    // p > 1: group every edge by its target bucket (counting sort), kept for the k-best pass.
    const size_t nbk = ws.next.size();
    if (p > 1) {
      std::vector<int32_t> &off = ws.offsets_by_slot[i];
      std::vector<Edge> &sorted = ws.edges_by_slot[i];
      off.assign(nbk + 1, 0);
      for (int32_t t : ws.edge_to) ++off[t + 1];
      for (size_t t = 0; t < nbk; ++t) off[t + 1] += off[t];
      sorted.resize(ws.edges.size());
      ws.fill.assign(off.begin(), off.end() - 1);
      for (size_t e = 0; e < ws.edges.size(); ++e) sorted[ws.fill[ws.edge_to[e]]++] = ws.edges[e];
    }
    // Each bucket's best partial path: its best edge applied to its source's best path. Every
    // bucket has at least one edge, so bucket t holds hypothesis t.
    std::vector<Hyp> &hyps = ws.slots[i];
    hyps.clear();
    size_t kept = 0;
    for (size_t t = 0; t < nbk; ++t) {
      Bucket bk = ws.next[t];
      bk.begin = static_cast<int32_t>(hyps.size());
      const Edge &ed = ws.best_edge[t];
      const Hyp &par = (*prev)[ed.src_begin];
      hyps.push_back(Hyp{ed.first, par.head + head[i * k + ed.arc], par.lm + ed.delta_lm,
                         ed.src_begin, ed.arc});
      bk.end = bk.begin + 1;
      ws.next[kept++] = bk;
    }
    ws.next.resize(kept);
    if (stats) {
      stats[2 * i] += static_cast<int64_t>(kept);
      stats[2 * i + 1] += lookups;
    }
    std::swap(ws.cur, ws.next);
    prev = &ws.slots[i];
    if (ws.cur.empty()) return 0;
  }
  return static_cast<int>(ws.cur.size());
}

// The m-th best path (0-based) into bucket t of slot i, or nullptr when it has fewer paths.
// Paths into a bucket are its edges applied to the paths of their source buckets; the next
// best is popped from a heap holding, per edge, the best path not yet taken through it, and
// the edge's following source path is asked for only then, recursively.
static const Workspace::PathRef *NthPath(Workspace &ws, const double *head, int k, int i,
                                         int32_t t, size_t m) {
  Workspace::LazyNode &nd = ws.lazy[i][t];
  const std::vector<Edge> &edges = ws.edges_by_slot[i];
  if (!nd.started) {
    nd.started = true;
    const std::vector<int32_t> &off = ws.offsets_by_slot[i];
    for (int32_t e = off[t]; e < off[t + 1]; ++e)
      nd.heap.push_back(Workspace::Cand{edges[e].first, e, 0});
    std::make_heap(nd.heap.begin(), nd.heap.end());
  }
  while (nd.found.size() <= m) {
    if (nd.heap.empty()) return nullptr;
    std::pop_heap(nd.heap.begin(), nd.heap.end());
    const Workspace::Cand c = nd.heap.back();
    nd.heap.pop_back();
    const Edge &ed = edges[c.edge];
    double src_head = 0.0, src_lm = 0.0;
    if (i > 0) {
      const Workspace::PathRef *src = NthPath(ws, head, k, i - 1, ed.src_begin, c.pos);
      src_head = src->head;
      src_lm = src->lm;
    }
    nd.found.push_back(Workspace::PathRef{c.score, src_head + head[i * k + ed.arc],
                                          src_lm + ed.delta_lm, c.edge, c.pos});
    if (i > 0) {
      const Workspace::PathRef *next = NthPath(ws, head, k, i - 1, ed.src_begin, c.pos + 1);
      if (next) {
        nd.heap.push_back(Workspace::Cand{next->total + ed.delta_total, c.edge, c.pos + 1});
        std::push_heap(nd.heap.begin(), nd.heap.end());
      }
    }
  }
  return &nd.found[m];
}

// The p best complete paths (p > 1): a last merge over the final buckets' lazy lists.
// Writes arcs [n*h] and total/head/lm [n] when out_total is given; always sets *last_total
// to the n-th path's total. Returns n.
static int LazyBest(Workspace &ws, const double *head, int h, int k, int p, int32_t *out_arcs,
                    double *out_total, double *out_head, double *out_lm, double *last_total) {
  ws.lazy.resize(h);
  for (int i = 0; i < h; ++i) {
    ws.lazy[i].clear();
    ws.lazy[i].resize(ws.slots[i].size());
  }
  std::vector<Workspace::Cand> heap;
  for (int32_t t = 0; t < static_cast<int32_t>(ws.slots[h - 1].size()); ++t) {
    const Workspace::PathRef *b = NthPath(ws, head, k, h - 1, t, 0);
    if (b) heap.push_back(Workspace::Cand{b->total, t, 0});
  }
  std::make_heap(heap.begin(), heap.end());
  int n = 0;
  while (!heap.empty() && n < p) {
    std::pop_heap(heap.begin(), heap.end());
    const Workspace::Cand c = heap.back();
    heap.pop_back();
    const Workspace::PathRef &fin = ws.lazy[h - 1][c.edge].found[c.pos];
    *last_total = fin.total;
    if (out_total) {
      out_total[n] = fin.total;
      out_head[n] = fin.head;
      out_lm[n] = fin.lm;
      int32_t node = c.edge;
      size_t rank = c.pos;
      for (int i = h - 1; i >= 0; --i) {
        const Workspace::PathRef &pr = ws.lazy[i][node].found[rank];
        const Edge &ed = ws.edges_by_slot[i][pr.edge];
        out_arcs[n * h + i] = ed.arc;
        node = ed.src_begin;
        rank = pr.rank;
      }
    }
    ++n;
    const Workspace::PathRef *next = NthPath(ws, head, k, h - 1, c.edge, c.pos + 1);
    if (next) {
      heap.push_back(Workspace::Cand{next->total, c.edge, c.pos + 1});
      std::push_heap(heap.begin(), heap.end());
    }
  }
  return n;
}

// The global p best over the final buckets' sorted lists (one more p-way merge).
static std::vector<int32_t> FinalBest(Workspace &ws, int h, int p) {
  std::vector<int32_t> best;
  const std::vector<Hyp> &last = ws.slots[h - 1];
  ws.heap.clear();
  for (int32_t b = 0; b < static_cast<int32_t>(ws.cur.size()); ++b) {
    ws.heap.push_back(Workspace::Cand{last[ws.cur[b].begin].total, b, ws.cur[b].begin});
  }
  std::make_heap(ws.heap.begin(), ws.heap.end());
  while (!ws.heap.empty() && static_cast<int>(best.size()) < p) {
    std::pop_heap(ws.heap.begin(), ws.heap.end());
    const Workspace::Cand c = ws.heap.back();
    ws.heap.pop_back();
    best.push_back(c.pos);
    if (c.pos + 1 < ws.cur[c.edge].end) {
      ws.heap.push_back(Workspace::Cand{last[c.pos + 1].total, c.edge, c.pos + 1});
      std::push_heap(ws.heap.begin(), ws.heap.end());
    }
  }
  return best;
}

// Exact p-best search over a sausage lattice.
//   words  [h*k]  KenLM word indices, row-major by slot; only the first counts[i] of slot i
//                 are arcs (the rest are padding); arcs sorted by head score, best first
//   head   [h*k]  head scores, nats
//   unk_ln        if not NaN, the LM log-prob (nats, <= 0) given to words with index 0 (<unk>)
//                 instead of KenLM's <unk> probability
//   beam          width of the bounding pre-pass (0: none, plain exhaustive search); the
//                 future bounds are tight when bd_build_bounds was called, else LM <= 0
//   out_arcs [p*h] arc index per slot of each returned path, best first
//   out_total/out_head/out_lm [p]
//   stats [2*h]   per slot: LM states kept after it, LM lookups (both passes)
// Returns the number of paths written (min(p, number of paths)), or -1 on error.
//   cx            kCtx only: the context LM and the arcs' raw token ids (see CtxArgs)
template <bool kCtx>
static int PBest(Handle *hd, const CtxArgs &cx, int bos, const uint32_t *ctx, int nctx, int h,
                 int k, const uint32_t *words, const int32_t *counts, const double *head,
                 double alpha, double unk_ln, int p, int beam, int32_t *out_arcs,
                 double *out_total, double *out_head, double *out_lm, int64_t *stats) {
  if (h <= 0 || k <= 0 || p <= 0 || alpha < 0) return -1;
  for (int i = 0; i < h; ++i)
    if (counts[i] <= 0 || counts[i] > k) return -1;
  const bool penalize_unk = !std::isnan(unk_ln);
  // One workspace per thread, on the heap: a thread_local object itself would be reached
  // through __tls_get_addr at every use in a shared library (the compiler propagates its
  // address into the search functions).
  thread_local std::unique_ptr<Workspace> ws_owner(new Workspace);
  Workspace &ws = *ws_owner;
  if (stats) std::fill(stats, stats + 2 * h, 0);
  const lm::ngram::State start = StartState(hd, bos, ctx, nctx);
  ComputeBounds(hd, ws, start, h, k, words, counts, head, alpha, penalize_unk, unk_ln,
                kCtx ? &cx : nullptr);
  // No lookups are shared from an earlier lattice: the memo is filled by this call's beam pass.
  ws.memo_in.resize(h);
  ws.memo_hashes.resize(h);
  ws.memo_out.resize(h);
  ws.memo_prob.resize(h);
  ws.memo_ctx.resize(h);
  ws.memo_ctx_next.resize(h);
  ws.memo_lm.resize(h);
  for (int i = 0; i < h; ++i) {
    ws.memo_hashes[i].clear();
    ws.memo_in[i].clear();
    ws.memo_out[i].clear();
    ws.memo_prob[i].clear();
    ws.memo_ctx[i].clear();
    ws.memo_ctx_next[i].clear();
    ws.memo_lm[i].clear();
  }

  const double neg_inf_d = -std::numeric_limits<double>::infinity();
  double lower_bound = neg_inf_d;
  const auto *probing = dynamic_cast<const lm::ngram::ProbingModel *>(hd->model);
  auto run = [&](int run_beam, double bound) {
    if (probing) {
      return Search<kCtx>(ProbingScorer(probing), ws, start, h, k, words, counts, head, alpha,
                          penalize_unk, unk_ln, p, run_beam, bound, stats, cx);
    }
    return Search<kCtx>(VirtualScorer{hd->model}, ws, start, h, k, words, counts, head, alpha,
                        penalize_unk, unk_ln, p, run_beam, bound, stats, cx);
  };
  if (beam > 0) {
    if (run(beam, lower_bound) > 0) {
      // The beam pass's p-th best is a score that p distinct paths reach: a valid bound.
      // Shave a rounding margin so that paths tied with it are never cut.
      double pth = neg_inf_d;
      if (p == 1) {
        std::vector<int32_t> pre = FinalBest(ws, h, 1);
        if (!pre.empty()) pth = ws.slots[h - 1][pre.back()].total;
      } else {
        double last = neg_inf_d;
        if (LazyBest(ws, head, h, k, p, nullptr, nullptr, nullptr, nullptr, &last) == p)
          pth = last;
      }
      if (pth > neg_inf_d) lower_bound = pth - 1e-9 * (1.0 + std::fabs(pth));
    }
  }
  run(0, lower_bound);
  if (p > 1) {
    double last = neg_inf_d;
    return LazyBest(ws, head, h, k, p, out_arcs, out_total, out_head, out_lm, &last);
  }
  std::vector<int32_t> best = FinalBest(ws, h, p);
  for (size_t r = 0; r < best.size(); ++r) {
    int32_t idx = best[r];
    const Hyp &fin = ws.slots[h - 1][idx];
    out_total[r] = fin.total;
    out_head[r] = fin.head;
    out_lm[r] = fin.lm;
    for (int i = h - 1; i >= 0; --i) {
      const Hyp &hy = ws.slots[i][idx];
      out_arcs[r * h + i] = hy.arc;
      idx = hy.parent;
    }
  }
  return static_cast<int>(best.size());
}

extern "C" {

// bd_pbest: the search above, KenLM alone (arguments as listed there).
int bd_pbest(void *handle, int bos, const uint32_t *ctx, int nctx, int h, int k,
             const uint32_t *words, const int32_t *counts, const double *head, double alpha,
             double unk_ln, int p, int beam, int32_t *out_arcs, double *out_total,
             double *out_head, double *out_lm, int64_t *stats) {
  return PBest<false>(static_cast<Handle *>(handle), CtxArgs{nullptr, nullptr, 0.0, 1.0, 0.0},
                      bos, ctx, nctx, h, k, words, counts, head, alpha, unk_ln, p, beam,
                      out_arcs, out_total, out_head, out_lm, stats);
}

// bd_pbest_ctx: the search with the LM term ln(lam * P_ctx + (1 - lam) * P_kenlm), P_ctx from
// the context LM `ctx_lm` (bd_ctx_new) after its whole text; `raw` [h*k] are the arcs' raw
// token ids (padding is never read); lam in (0, 1]. The other arguments are bd_pbest's; `out_lm`
// is the interpolated LM's log-prob (nats). Returns as bd_pbest.
int bd_pbest_ctx(void *handle, void *ctx_lm, double lam, const uint32_t *raw, int bos,
                 const uint32_t *ctx, int nctx, int h, int k, const uint32_t *words,
                 const int32_t *counts, const double *head, double alpha, double unk_ln, int p,
                 int beam, int32_t *out_arcs, double *out_total, double *out_head,
                 double *out_lm, int64_t *stats) {
  if (!ctx_lm || !(lam > 0.0 && lam <= 1.0)) return -1;
  const CtxArgs cx{static_cast<const CtxLM *>(ctx_lm), raw, lam, 1.0 - lam, std::log1p(-lam)};
  return PBest<true>(static_cast<Handle *>(handle), cx, bos, ctx, nctx, h, k, words, counts,
                     head, alpha, unk_ln, p, beam, out_arcs, out_total, out_head, out_lm,
                     stats);
}

// The context LM: a new empty one of order n (1..16; null otherwise or out of memory) ...
void *bd_ctx_new(int order) {
  if (order < 1 || order > kMaxCtxOrder) return nullptr;
  try {
    return new CtxLM(order);
  } catch (const std::exception &) {
    return nullptr;
  }
}

void bd_ctx_free(void *ctx_lm) { delete static_cast<CtxLM *>(ctx_lm); }

// ... grown by n tokens (the n-grams ending at each); 0, or -1 when out of memory ...
int bd_ctx_extend(void *ctx_lm, const uint32_t *tokens, int64_t n) {
  CtxLM *c = static_cast<CtxLM *>(ctx_lm);
  try {
    for (int64_t i = 0; i < n; ++i) c->Extend(tokens[i]);
    return 0;
  } catch (const std::exception &) {
    return -1;
  }
}

// ... its number of nodes (histories of up to n-1 tokens) and of n-gram entries ...
int64_t bd_ctx_size(void *ctx_lm, int64_t *entries) {
  const CtxLM *c = static_cast<const CtxLM *>(ctx_lm);
  if (entries) *entries = static_cast<int64_t>(c->used);
  return static_cast<int64_t>(c->nodes.size());
}

// ... and P_ctx (a probability) of each of n tokens after its text and the tokens before it.
void bd_ctx_probs(void *ctx_lm, const uint32_t *tokens, int n, double *out) {
  const CtxLM *c = static_cast<const CtxLM *>(ctx_lm);
  int32_t s = c->tail_state;
  for (int i = 0; i < n; ++i) c->Step(s, tokens[i], out[i], s);
}

}  // extern "C"
