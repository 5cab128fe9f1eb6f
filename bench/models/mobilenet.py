"""Keras' own MobileNetV2 (keras.applications, untrained: nothing is downloaded) at 96x96x3 and
10 classes, compiled as its documentation's transfer-learning guide compiles a classifier:
Adam and sparse categorical cross-entropy. mptune makes the data from the model's shapes."""

import keras


def build_model() -> keras.Model:
    model = keras.applications.MobileNetV2(weights=None, input_shape=(96, 96, 3), classes=10)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model
