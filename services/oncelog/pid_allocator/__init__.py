"""pid-allocator: lends disjoint blocks of producer ids from one durable counter; never reuses an id."""
