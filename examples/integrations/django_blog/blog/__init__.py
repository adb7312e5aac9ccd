"""The blog app of the Django recipe: models, ORM loaders, handlers, views, graphene schema."""
