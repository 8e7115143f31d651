"""The invoice desk's book: each customer's tier and each tier's discount."""

from __future__ import annotations

TIERS = {"Acme": "gold", "Globex": "silver", "Initech": "bronze", "Umbrella": "gold", "Hooli": "silver",
         "Stark": "bronze", "Wayne": "gold", "Wonka": "silver"}
"""Each customer's tier."""
RATES = {"gold": 0.2, "silver": 0.1, "bronze": 0.05}
"""The discount of each tier."""
