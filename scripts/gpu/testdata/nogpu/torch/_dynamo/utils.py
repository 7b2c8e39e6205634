counters = {}
