"""The five sequence mixers. Module names match the mixer names used by ``MinGRUStack``
(``log``, ``signed``, ``rotation``, ``givens``, ``delta``) and their ``mingru_jax`` twins."""
