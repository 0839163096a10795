"""Vision inputs: ImageNet TFRecords (`input_generator`) and ResNet preprocessing."""
