"""Where the data files shipped inside the package live (``medretrieve/assets``): term tables, the general
WordPiece vocabulary, the demo corpus."""
from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "assets"
