"""Export: run folder → ONNX deploy bundle → TensorRT engine."""
