"""A stand-in for vllm, for check_test.go: present, never imported on a machine with no GPU."""
raise ImportError("the GPU check imported this stand-in")
