"""A KerasHub Gemma fine-tune with LoRA, as the Gemma guides write it but tiny and with no
download: a GemmaCausalLM built from its constructor (compiled there), LoRA on its backbone, and
synthetic token ids with their padding mask, the labels the ids shifted by one."""

import keras_hub
import numpy as np

vocabulary_size, sequence_length, samples = 256, 16, 128
rng = np.random.default_rng(0)
tokens = rng.integers(1, vocabulary_size, size=(samples, sequence_length + 1)).astype("int32")
features = {
    "token_ids": tokens[:, :-1],
    "padding_mask": np.ones((samples, sequence_length), dtype="bool"),
}
labels = tokens[:, 1:]

backbone = keras_hub.models.GemmaBackbone(
    vocabulary_size=vocabulary_size,
    num_layers=2,
    num_query_heads=2,
    num_key_value_heads=1,
    hidden_dim=32,
    intermediate_dim=64,
    head_dim=16,
)
causal_lm = keras_hub.models.GemmaCausalLM(backbone=backbone, preprocessor=None)
backbone.enable_lora(rank=4)
causal_lm.fit(features, labels, batch_size=8, epochs=2)
