import sys

from blockdraft.cli import main

sys.exit(main())
