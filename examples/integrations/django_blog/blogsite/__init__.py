"""The Django project of the recipe: settings and URLs."""
