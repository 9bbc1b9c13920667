"""ragjax.data: datasets in one schema (TFDS array_record builders, `load_split`), the
synthetic search world, importers for public QA formats, and the small-policy tokenizer.

Submodules import tensorflow_datasets / transformers lazily where they can, so `schema`,
`world` and the importers stay cheap to import.
"""
