from lumos.cli import entry

entry()
