"""Settings as dataclasses and command lines made from them.

settings.py  `setting` (help beside each field, `Literal` choices), OutputSettings, settings.json
cli.py       one flag per field, 80-column help, --config files (TOML, YAML, JSON), --resume DIR
"""
