import sys

from lumos.cli import main

sys.exit(main())
