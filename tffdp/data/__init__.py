"""Datasets, partitions and federated client data (`tffdp.data`)."""
from tffdp.data.loaders import (ChecksumError, DataError, DataNotFoundError, Dataset,
                                DATASETS, default_data_dir, load_dataset, synthetic_dataset,
                                train_validation_split)
from tffdp.data.partitioners import PARTITIONERS, partition
from tffdp.data.federated import FederatedData, PoissonLot, ShuffleBatch
