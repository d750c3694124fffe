"""The proxy's HTTP surfaces, a router each."""
