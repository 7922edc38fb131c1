from tbprobe.cli import main

raise SystemExit(main())
