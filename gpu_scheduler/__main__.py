from gpu_scheduler import cli

raise SystemExit(cli.main())
