"""One module per `lumos` sub-command; each exposes `register(subparsers)`."""
