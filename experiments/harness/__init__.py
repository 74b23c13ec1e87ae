"""The study harness: record store with resume, the protocols of the records (:mod:`.protocol`), artifact cache,
generated-block writer, one command line, and the problem setups studies and benchmarks share (:mod:`.setups`).
Study-independent: nothing here imports a study or a benchmark (the registry imports one by name, on request)."""
