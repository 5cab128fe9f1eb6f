"""Keras' own ResNet50 (keras.applications, untrained: nothing is downloaded) at 224x224x3 and
1,000 classes, with SGD and momentum: the model of the H200 search in ``../shared/gpu/`` that
bench/bench_gpu_search.py replays, for bench/gpu_check.py. mptune makes the data from the
model's shapes."""

import keras


def build_model() -> keras.Model:
    model = keras.applications.ResNet50(weights=None, input_shape=(224, 224, 3), classes=1000)
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
        loss="sparse_categorical_crossentropy",
    )
    return model
