"""HTTP layer: FastAPI routers, Pydantic schemas, auth dependencies and problem+json errors."""
