"""The HTTP service: ``create_app`` (a FastAPI app to mount or run), ``ServerConfig``; ``medretrieve serve`` runs it
under uvicorn with several workers. Needs the ``serve`` extra (fastapi, uvicorn, pydantic, prometheus-client)."""
from .app import app_from_env, create_app
from .config import ServerConfig

__all__ = ["create_app", "app_from_env", "ServerConfig"]
