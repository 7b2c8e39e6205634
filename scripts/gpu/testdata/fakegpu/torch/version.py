hip = None
