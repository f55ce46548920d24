"""Operations: logging, and the metrics and health endpoints of the service."""
