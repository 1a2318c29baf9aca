"""pytest glue: options, markers, fixtures, parametrization and reporting hooks."""
