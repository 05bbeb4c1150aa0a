"""HTML and PNG reports of one job or of the fleet: `gather` reads the warehouse, `charts`
draws the figures (Vega-Lite via altair), `reports` assembles them, `page` writes the page."""
