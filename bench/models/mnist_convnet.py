"""keras.io's "Simple MNIST convnet" (Conv2D 32 and 64 with max pooling, dropout, a softmax
over 10 classes, Adam and categorical cross-entropy on one-hot labels), without a
``make_dataset``: mptune makes the data from the model's shapes and gives it to fit as its own
epochs of 64 batches. At batch sizes of 512 and more such an epoch outlasts a trial's window
on a 2-core CPU (issue 50's bench_fit rows)."""

import keras


def build_model() -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
            keras.layers.MaxPooling2D(pool_size=(2, 2)),
            keras.layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
            keras.layers.MaxPooling2D(pool_size=(2, 2)),
            keras.layers.Flatten(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(loss="categorical_crossentropy", optimizer="adam")
    return model
