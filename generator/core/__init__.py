"""The core every other package stands on: the repository's paths, the user-input error, safe file
reads and atomic writes, the values schema, Kubernetes' and Helm's name rules, and the plumbing of
command-line options. It imports nothing else of the generator (.importlinter holds the layers)."""
