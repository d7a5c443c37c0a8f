# Freeze ddq into a firmware: include("$(MPY_DIR)/../ddq/manifest.py") from a board's manifest.
# The version must equal port/ddq.py's __version__ and package.json's (tests/host checks it).
metadata(
    description="Durable delivery queue (outbox) for MicroPython: a port of the C DDQ format.",
    version="0.1.0",
)

module("ddq.py", base_path="port")
module("ddq_recover.py", base_path="port")  # open and recovery, loaded by every open
module("ddq_compact.py", base_path="port")  # compaction, loaded by the first one
module("ddq_extra.py", base_path="port")  # items(), lapsed(), quarantine(), ...: on first use
module("ddq_index.py", base_path="port")  # recovery index, imported on demand
module("ddq_cut.py", base_path="port")  # finishes a crashed tail cut, imported on demand
module("ddq_fat.py", base_path="port")  # the lock key on FAT (L3), imported only there
module("ddq_reclaim.py", base_path="port")  # staged reclamation (reclaim_step > 0)
module("ddq_hold.py", base_path="port")  # the hold admission rule (window > 0)
module("ddq_admit.py", base_path="port")  # libddq's admission rule (window 0)
module("ddq_outbox.py", base_path="port")  # optional message layer (Outbox)
module("ddq_seal.py", base_path="port")  # its HMAC tags and AES-CTR (hmac_key), on first use
module("ddq_window.py", base_path="port")  # its windowed delivery (a windowed sender), on use
module("ddq_batch.py", base_path="port")  # optional: readings that share items (BatchOutbox)
module("ddq_mqtt.py", base_path="port")  # optional MQTT QoS 1 sender for ddq_outbox.Outbox
module("ddq_tls.py", base_path="port")  # its TLS contexts (Sender(ssl=...)), on first use
module("ddq_clients.py", base_path="port")  # its adapters (umqtt.simple, mqtt_as, paho), on use
module("ddq_group.py", base_path="port")  # optional durable-on-return group writes (gateways)
module("ddq_salvage.py", base_path="port")  # salvage: to a new directory, or at open
module("ddq_flash.py", base_path="port")  # optional: a queue on raw flash (FlashStorage)
module("ddq_app.py", base_path="port")  # the example board apps' shared part (boards/*/main.py)
