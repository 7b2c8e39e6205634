raise ImportError('torch must not be imported')
