"""A KerasHub fine-tune as the KerasHub guides write it, at a tiny size and with no download: a
BertTextClassifier built from its constructor (which compiles it: the script never calls
compile), LoRA on its backbone, its precision from an argparse default, a batch of 16, and a
dict of token ids, segment ids and padding mask as its input. mptune must observe
mixed_bfloat16 at batch 16."""

import argparse

import keras
import keras_hub
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--policy", default="mixed_bfloat16")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()
keras.mixed_precision.set_global_policy(args.policy)

vocabulary_size, sequence_length, samples = 512, 32, 256
rng = np.random.default_rng(0)
token_ids = rng.integers(1, vocabulary_size, size=(samples, sequence_length)).astype("int32")
lengths = rng.integers(8, sequence_length + 1, size=(samples, 1))
padding_mask = np.arange(sequence_length)[None, :] < lengths
token_ids = np.where(padding_mask, token_ids, 0).astype("int32")
features = {
    "token_ids": token_ids,
    "segment_ids": np.zeros((samples, sequence_length), dtype="int32"),
    "padding_mask": padding_mask,
}
labels = (token_ids[:, 0] % 2).astype("int32")

backbone = keras_hub.models.BertBackbone(
    vocabulary_size=vocabulary_size,
    num_layers=2,
    num_heads=2,
    hidden_dim=32,
    intermediate_dim=64,
    max_sequence_length=sequence_length,
)
classifier = keras_hub.models.BertTextClassifier(
    backbone=backbone, num_classes=2, preprocessor=None
)
backbone.enable_lora(rank=4)
classifier.fit(features, labels, batch_size=16, epochs=args.epochs)
