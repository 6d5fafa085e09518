"""Who may connect and what they may do: TLS, SASL, credentials, ACLs, the admin gate."""
