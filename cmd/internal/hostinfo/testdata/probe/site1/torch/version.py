__version__ = '9.9.9'
cudart = '0'
cuda: Optional[str] = '12.4'
hip = None
