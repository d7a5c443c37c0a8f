"""Refreshes the generated block of docs/RELIABILITY.md from a run_ci aggregate
(`run_ci.py --write-docs`). Only the text between the two markers is rewritten."""

import datetime

BEGIN = (
    "<!-- torture:generated:begin (tests/torture/run_ci.py --write-docs rewrites this block) -->"
)
END = "<!-- torture:generated:end -->"
# The liveness part's message counts, in the order this table and run_ci.py's summary give them.
LIVENESS_COUNTS = ("admitted", "delivered", "dead", "cuts", "reboots", "fulls")


def block(line, sb, extra, wall, full):
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        BEGIN,
        "",
        "### Latest run",
        "",
        "`%s`, %s, wall %.0f s on 2 jobs, %s:"
        % (
            "run_ci.py --full" if full else "run_ci.py",
            when,
            wall,
            "pass"
            if sb["lost"]
            == sb["resurrected"]
            == sb["reused_seq"]
            == sb["unexpected"]
            == sb.get("bricked", 0)
            == sb.get("stuck", 0)
            == sb.get("flash_stuck", 0)
            == 0
            else "FAIL",
        ),
        "",
        "```",
        line,
        "```",
        "",
    ]
    bm = extra["by_model"]
    out += ["| Part | What ran | Count |", "|---|---|---|"]
    out.append(
        "| 1 crash states | distinct states (content hash; per-task counts by the model that "
        "first produced them: posix / lfs / fat) | %d (%s) |"
        % (sb["crash_states"], " / ".join(str(bm.get(m, 0)) for m in ("posix", "lfs", "fat")))
    )
    out.append(
        "| 1 crash states | state x op-in-flight judgements; recovery cut again (depth 2) | %d; "
        "%d |" % (extra["crash_checked"], extra["depth2_states"])
    )
    out.append(
        "| 1 crash states | Corrupt on a mid-file hole (model c, reported, allowed) | %d |"
        % extra["corrupt_reported"]
    )
    for fs in ("lfs", "fat"):
        e = extra[fs]
        out.append(
            "| 2 %s cuts | drop / torn / raise / errno | %d / %d / %d / %d |"
            % ("LittleFS" if fs == "lfs" else "FAT", e["drop"], e["torn"], e["raise"], e["errno"])
        )
    out.append(
        "| 2 FAT cuts | on a FAT image fatcheck calls damaged; failures there blamed on FatFs | "
        "%d; %d |" % (extra.get("fat_damaged", 0), extra.get("fat_fs_damage", 0))
    )
    out.append(
        "| 3 bad images | distinct CPython images: Corrupt / clean valid prefix / "
        "indistinguishable accepted (seq relabel; segment cut a smaller segment_bytes explains) | "
        "%d: %d / %d / %d (%d; %d) |"
        % (
            sb["bad_images"],
            extra["bad_corrupt"],
            extra["bad_clean"],
            extra["bad_forged"],
            extra.get("bad_relabel", 0),
            extra.get("bad_undetectable_cut", 0),
        )
    )
    out.append(
        "| 3 bad images | Hypothesis examples; seeded replays on MicroPython (forged accepted) | "
        "%d; %d (%d) |" % (extra["hypothesis"], extra["mp_bad_images"], extra.get("mp_forged", 0))
    )
    if sb.get("hmac_forged"):
        hk = extra.get("hmac_by_kind", {})
        out.append(
            "| 3b forged messages | HMAC-signed envelopes altered or forged, valid record CRCs, "
            "opened with the key: tried (of them encrypted, E23) / returned by get() (control "
            "without the key: accepted) | %d (%d) / %d (%d); %s |"
            % (
                sb["hmac_forged"],
                extra.get("hmac_encrypted_forged", 0),
                sb["hmac_forged_accepted"],
                extra.get("hmac_control_accepted", 0),
                ", ".join("%s %d" % (k, hk[k]) for k in sorted(hk)),
            )
        )
    ix = extra.get("index")
    if ix:
        out.append(
            "| 1-3 recovery index | compared with an index_bytes=0 open / opened through "
            "queue.index: crash states; power cuts (cut inside a queue.index write); bad images; "
            "Hypothesis | %d / %d; %d / %d (%d); %d / %d; %d / %d |"
            % (
                ix["crash"][0],
                ix["crash"][1],
                ix["mp"][0],
                ix["mp"][1],
                extra.get("index_write_cuts", 0),
                ix["bad"][0],
                ix["bad"][1],
                ix["hypo"][0],
                ix["hypo"][1],
            )
        )
        out.append(
            "| 1-3 recovery index | an index open that differs from the full replay "
            "(index_mismatch; of them a damaged or stale index accepted) | %d (%d) |"
            % (sb.get("index_mismatch", 0), extra.get("forged_index", 0))
        )
    if sb.get("salvage_images"):
        out.append(
            "| 5 salvage | bad images salvaged into a new directory: intact DATA of live items / "
            "kept / wrong / reused seq / reset | %d: %d / %d / %d / %d / %d |"
            % (
                sb["salvage_images"],
                sb["salvage_intact"],
                sb["salvage_kept"],
                sb["salvage_wrong"],
                sb["salvage_reused"],
                sb["salvage_reset"],
            )
        )
    if sb.get("salvage_inplace_images"):
        out.append(
            '| 5b salvage in place | bad images opened with on_corrupt="salvage": intact DATA of '
            "live items / kept / reset | %d: %d / %d / %d |"
            % (
                sb["salvage_inplace_images"],
                sb["salvage_inplace_intact"],
                sb["salvage_inplace_kept"],
                sb["salvage_inplace_reset"],
            )
        )
        out.append(
            "| 5b salvage in place | power cut at every step (POSIX, LittleFS, FAT; depth 2): "
            "salvages cut / states reopened (FAT rename split) / lost / wrong / reused / damage "
            "not kept | %d / %d (%d) / %d / %d / %d / %d |"
            % (
                sb["salvage_cut_images"],
                sb["salvage_cut_states"],
                sb["salvage_cut_fat_split"],
                sb["salvage_cut_lost"],
                sb["salvage_cut_wrong"],
                sb["salvage_cut_reused"],
                sb["salvage_cut_aside"],
            )
        )
    if "continued_states" in sb:
        c, v = extra.get("continued", {}), extra.get("enospc_by_view", {})
        out.append(
            "| 1c continued states | recovered crash states written on, closed and reopened: "
            "CPython crash states (POSIX / LittleFS / FAT models) / MicroPython LittleFS cuts / "
            "FAT cuts; refused opens (bricked) | %d: %d / %d / %d; %d |"
            % (
                sb["continued_states"],
                c.get("crash", 0),
                c.get("mp-lfs", 0),
                c.get("mp-fat", 0),
                sb["bricked"],
            )
        )
        out.append(
            "| 6 ENOSPC | write points failed with ENOSPC / distinct states judged (as left; "
            "power cut: POSIX / LittleFS / FAT) / refused while full (IOFailure, allowed); "
            "natural reproduction: seeds (bricked) | %d / %d (%s) / %d; %d (%d) |"
            % (
                sb["enospc_points"],
                extra.get("enospc_states", 0),
                " / ".join(str(v.get(m, 0)) for m in ("live", "posix", "lfs", "fat")),
                extra.get("enospc_full_refused", 0),
                extra.get("natural", [0, 0])[0],
                extra.get("natural", [0, 0])[1],
            )
        )
    lv = extra.get("liveness")
    if sb.get("liveness_runs") and lv:
        out.append(
            "| 7 liveness | runs (BatchOutbox; windowed sender): admitted / delivered / dead "
            "letters / power cuts / reboots / puts refused Full; most heal rounds used (largest "
            "bound) | %d (%d; %d): %s; %d (%d) |"
            % (
                sb["liveness_runs"],
                lv["batch"],
                lv["windowed"],
                " / ".join("%d" % lv[k] for k in LIVENESS_COUNTS),
                lv["rounds_max"],
                lv["bound_max"],
            )
        )
        out.append(
            "| 7 liveness | stuck / raised / phantom (must be 0); by cause | %d / %d / %d; %s |"
            % (
                sb["stuck"],
                sb["liveness_raised"],
                sb["phantom"],
                ", ".join("%s %d" % (k, v) for k, v in sorted(lv["by_cause"].items())) or "none",
            )
        )
    fl = extra.get("flash")
    if sb.get("flash_cut_states") and fl:
        bad = fl["bad"]
        out.append(
            "| 9 raw flash | cut states judged (CPython / MicroPython): torn and completed draws "
            "of every program and erase; of them cut again in the recovery (depth 2) | "
            "%d (%d / %d); %d |"
            % (
                sb["flash_cut_states"],
                fl["cpython"],
                fl["micropython"],
                fl["depth2_cut"],
            )
        )
        out.append(
            "| 9 raw flash | cut events by kind; items claimed and acked by the drains | %s; %d |"
            % (", ".join("%s %d" % (k, v) for k, v in sorted(fl["kinds"].items())), fl["drained"])
        )
        out.append(
            "| 9 raw flash | lost / resurrected / reused seq / bricked / stuck / unexpected (must "
            "be 0) | %s |"
            % " / ".join(
                str(bad.get(k, 0))
                for k in ("lost", "resurrected", "reused_seq", "bricked", "stuck", "unexpected")
            )
        )
    kinds = extra["fault_by_kind"]
    out.append(
        "| 4 faults | kinds x call index x transient/persistent | %d kinds, %d runs |"
        % (sb["fault_kinds"], sb["fault_points"])
    )
    out.append(
        "| 4 faults | runs per kind | %s |"
        % ", ".join("%s %d" % (k, kinds[k]) for k in sorted(kinds))
    )
    out += ["", END]
    return "\n".join(out)


def write(path, line, sb, extra, wall, full):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        text = ""
    new = block(line, sb, extra, wall, full)
    if BEGIN in text and END in text:
        a = text.index(BEGIN)
        b = text.index(END) + len(END)
        text = text[:a] + new + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + new + "\n"
    with open(path, "w") as f:
        f.write(text)
