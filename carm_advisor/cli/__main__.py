import sys

from carm_advisor.cli.main import main

sys.exit(main())
