"""Tiny Keras models the tuner tests build in worker processes (importable as tiny_models:NAME)."""

import keras


def tiny_cnn(config=None):
    fmt = keras.config.image_data_format()
    shape = (8, 8, 3) if fmt == "channels_last" else (3, 8, 8)
    inputs = keras.Input(shape)
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Flatten()(x)
    outputs = keras.layers.Dense(5, activation="softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="tiny_cnn")
