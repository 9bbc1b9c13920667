"""ragjax.data: datasets in one schema, read by one function (`readers.read_examples`, over
importers for public QA formats); the synthetic search world; a TFDS array_record export of a
question set (`builders`, read back by `load.load_split`); the small-policy tokenizer.

Submodules import tensorflow_datasets / transformers lazily where they can, so `schema`,
`world` and the importers stay cheap to import.
"""
