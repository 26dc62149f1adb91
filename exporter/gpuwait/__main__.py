from gpuwait.cli import main

raise SystemExit(main())
