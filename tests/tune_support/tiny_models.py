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


def dict_inputs(config=None):
    """A Functional model built on a dict of named inputs: it is called with that dict."""
    inputs = {"image": keras.Input((4,), name="image"), "extra": keras.Input((2,), name="extra")}
    x = keras.layers.Concatenate()([inputs["image"], inputs["extra"]])
    return keras.Model(inputs, keras.layers.Dense(5, dtype="float32")(x), name="dict_inputs")


class SubclassedTokens(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embed = keras.layers.Embedding(300, 4)
        self.out = keras.layers.Dense(5, dtype="float32")

    def call(self, ids):
        return self.out(keras.ops.mean(self.embed(ids), axis=1))


def subclassed_tokens(config=None):
    """Built on float ids (Keras records no dtype): the worker must feed ids the Embedding can take."""
    model = SubclassedTokens(name="subclassed_tokens")
    model(keras.ops.zeros((1, 6)))
    return model
