package hostinfo

// Keys are this package's spellings of the format's host keys, for
// keys_test.go.
var Keys = []string{osKey, archKey, kernelKey, cpuModelKey, cpuFlagsKey, gpuModelKey, gpuComputeKey, gpuDriverKey}
