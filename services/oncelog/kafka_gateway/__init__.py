"""kafka-gateway: speaks Kafka's binary protocol to unmodified Kafka clients, over the oncelog services."""
