"""Web Push: encrypted messages (RFC 8291) signed for the push service (VAPID, RFC 8292), pure Python."""
