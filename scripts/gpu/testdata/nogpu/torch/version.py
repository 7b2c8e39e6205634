hip = "0.0-fake"
