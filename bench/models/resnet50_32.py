"""Keras' own ResNet50 (keras.applications, untrained: nothing is downloaded) at 32x32x3 and
10 classes, compiled as keras.io compiles an image classifier: Adam and sparse categorical
cross-entropy. A GPU-sized model whose steps take about a second on a 2-core CPU (issue 50:
a trial of it timed fit's loop for 135 s, and one reached its 300 s limit while timing).
mptune makes the data from the model's shapes: there is no ``make_dataset``."""

import keras


def build_model() -> keras.Model:
    model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model
