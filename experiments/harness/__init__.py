"""The study harness: record store with resume and protocol versioning, artifact cache, generated-block writer,
one command line. Study-independent: nothing here imports a study (the registry imports one only on request)."""
