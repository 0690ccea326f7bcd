"""Datasets that need no download, as content-addressed shards with a manifest.

`build_dataset("digits")` (scikit-learn's bundled `load_digits`) or `build_dataset("pycorpus")` (bytes of
the Python standard library's own source) returns a `DatasetBlobs`: the manifest bytes, its sha256 (the
`manifest_hash` a task spec names) and the shard blobs. A worker fetches the manifest and shards by hash
from any blob service, checks every hash (`load_dataset`), and gets a `Dataset` held in memory.
"""

from .dataset import Dataset, sample_batch, batch_indices
from .manifest import DatasetBlobs, build_dataset, load_dataset, dataset_from_blobs, DATASET_BUILDERS

__all__ = ["Dataset", "DatasetBlobs", "build_dataset", "load_dataset", "dataset_from_blobs", "sample_batch",
           "batch_indices", "DATASET_BUILDERS"]
