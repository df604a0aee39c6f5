"""The REST API's root (``/api/v1/``): the schema, ``me``, and the error format every app's API
answers with (errors.py). Each app contributes its routes from its own ``api_urls`` module."""
