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


def tokens_and_features(config=None):
    """Two inputs, one of them integer token ids into a 30-word Embedding."""
    tokens = keras.Input((6,), dtype="int32", name="tokens")
    features = keras.Input((3,), name="features")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(30, 4)(tokens))
    x = keras.layers.Concatenate()([pooled, keras.layers.Dense(4)(features)])
    return keras.Model([tokens, features], keras.layers.Dense(5, dtype="float32")(x), name="tokens_and_features")


class SubclassedMLP(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(5, dtype="float32")

    def call(self, x):
        return self.out(self.hidden(x))


def subclassed_mlp(config=None):
    model = SubclassedMLP(name="subclassed_mlp")
    model(keras.ops.zeros((1, 7)))
    return model
