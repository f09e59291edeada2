"""Money: the price catalog, a month's chargeback, month close, the export files and the sharing dividend."""
