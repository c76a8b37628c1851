import os

# TensorFlow's start-up chatter would bury test output; the CLI sets the same.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
