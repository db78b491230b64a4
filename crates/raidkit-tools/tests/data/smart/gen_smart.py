#!/usr/bin/env python3
"""Write representative `smartctl --json -a` outputs for the SMART tests.

Hand-made (no failing drives at hand), with the field names, nesting and types smartctl 7.x
emits (smartmontools' JSON: `smartctl.exit_status`, `device.{name,type,protocol}`,
`smart_status.passed`, `ata_smart_attributes.table[].{id,name,value,worst,thresh,when_failed,
flags,raw.{value,string}}`, `nvme_smart_health_information_log.*`, `temperature.current`,
`power_on_time.hours`). `vda-unavailable.json` is real: smartctl 7.3 on this virtio disk.
Run from this folder: python3 gen_smart.py
"""
import json

def ctl(argv_dev, exit_status, messages=None):
    c = {"version": [7, 3], "svn_revision": "5338",
         "platform_info": "x86_64-linux-6.1.0-13-amd64", "build_info": "(local build)",
         "argv": ["smartctl", "--json", "-a", "-n", "standby", argv_dev],
         "exit_status": exit_status}
    if messages:
        c["messages"] = [{"string": m, "severity": "error"} for m in messages]
    return c

def attr(id_, name, value, worst, thresh, raw, flags=(51, "PO--CK ", True), when_failed="", raw_string=None):
    fv, fs, pre = flags
    return {"id": id_, "name": name, "value": value, "worst": worst, "thresh": thresh,
            "when_failed": when_failed,
            "flags": {"value": fv, "string": fs, "prefailure": pre, "updated_online": True,
                      "performance": False, "error_rate": False, "event_count": not pre,
                      "auto_keep": True},
            "raw": {"value": raw, "string": raw_string if raw_string is not None else str(raw)}}

def ata(dev, model, serial, fw, passed, table, temp, hours, exit_status, rotation=7200):
    return {
        "json_format_version": [1, 0],
        "smartctl": ctl(dev, exit_status),
        "device": {"name": dev, "info_name": dev + " [SAT]", "type": "sat", "protocol": "ATA"},
        "model_family": "Western Digital Red",
        "model_name": model, "serial_number": serial, "firmware_version": fw,
        "user_capacity": {"blocks": 7814037168, "bytes": 4000787030016},
        "logical_block_size": 512, "physical_block_size": 4096,
        "rotation_rate": rotation,
        "interface_speed": {"max": {"sata_value": 14, "string": "6.0 Gb/s", "units_per_second": 60, "bits_per_unit": 100000000},
                            "current": {"sata_value": 3, "string": "6.0 Gb/s", "units_per_second": 60, "bits_per_unit": 100000000}},
        "local_time": {"time_t": 1764084782, "asctime": "Tue Nov 25 15:33:02 2025 UTC"},
        "smart_status": {"passed": passed},
        "ata_smart_attributes": {"revision": 16, "table": table},
        "power_on_time": {"hours": hours},
        "power_cycle_count": 41,
        "temperature": {"current": temp},
    }

def base_table(realloc=0, pending=0, offline=0, crc=0, realloc_value=200, realloc_failed=""):
    return [
        attr(1, "Raw_Read_Error_Rate", 200, 200, 51, 0, (47, "POSR-K ", True)),
        attr(3, "Spin_Up_Time", 176, 173, 21, 6183, (39, "POS--K ", True)),
        attr(5, "Reallocated_Sector_Ct", realloc_value, realloc_value, 140, realloc, (51, "PO--CK ", True), realloc_failed),
        attr(9, "Power_On_Hours", 62, 62, 0, 28211, (50, "-O--CK ", False)),
        attr(194, "Temperature_Celsius", 116, 104, 0, 36, (34, "-O---K ", False)),
        attr(197, "Current_Pending_Sector", 200, 200, 0, pending, (50, "-O--CK ", False)),
        attr(198, "Offline_Uncorrectable", 100, 253, 0, offline, (48, "----CK ", False)),
        attr(199, "UDMA_CRC_Error_Count", 200, 200, 0, crc, (50, "-O--CK ", False)),
    ]

samples = {
    "ata-healthy.json": ata("/dev/sda", "WDC WD40EFRX-68N32N0", "WD-WCC7K0123456", "82.00A82",
                            True, base_table(), 36, 28211, 0),
    "ata-pending.json": ata("/dev/sdb", "WDC WD40EFRX-68N32N0", "WD-WCC7K0123471", "82.00A82",
                            True, base_table(realloc=8, pending=16, crc=3), 41, 30102, 0),
    # Overall health FAILED (bit 3), a prefail attribute at threshold now (bit 4).
    "ata-failing.json": ata("/dev/sdc", "WDC WD40EFRX-68N32N0", "WD-WCC7K0123502", "82.00A82",
                            False, base_table(realloc=1912, pending=48, offline=48, realloc_value=120,
                                              realloc_failed="now"), 44, 41022, 24),
}

def nvme(dev, media_errors, critical_warning, spare, used, temp, exit_status, passed):
    return {
        "json_format_version": [1, 0],
        "smartctl": ctl(dev, exit_status),
        "device": {"name": dev, "info_name": dev, "type": "nvme", "protocol": "NVMe"},
        "model_name": "Samsung SSD 970 EVO Plus 1TB", "serial_number": "S4EWNX0R712345K",
        "firmware_version": "2B2QEXM7",
        "nvme_pci_vendor": {"id": 5197, "subsystem_id": 5197},
        "nvme_ieee_oui_identifier": 9528, "nvme_total_capacity": 1000204886016,
        "nvme_unallocated_capacity": 0, "nvme_controller_id": 4, "nvme_version": {"string": "1.3", "value": 66304},
        "nvme_number_of_namespaces": 1,
        "user_capacity": {"blocks": 1953525168, "bytes": 1000204886016},
        "logical_block_size": 512,
        "local_time": {"time_t": 1764084782, "asctime": "Tue Nov 25 15:33:02 2025 UTC"},
        "smart_status": {"passed": passed, "nvme": {"value": critical_warning}},
        "nvme_smart_health_information_log": {
            "critical_warning": critical_warning, "temperature": temp, "available_spare": spare,
            "available_spare_threshold": 10, "percentage_used": used,
            "data_units_read": 31415926, "data_units_written": 27182818,
            "host_reads": 628318530, "host_writes": 271828182, "controller_busy_time": 1234,
            "power_cycles": 310, "power_on_hours": 9876, "unsafe_shutdowns": 12,
            "media_errors": media_errors, "num_err_log_entries": 3 if media_errors else 0,
            "warning_temp_time": 0, "critical_comp_time": 0, "temperature_sensors": [temp, temp + 6]},
        "temperature": {"current": temp},
        "power_cycle_count": 310,
        "power_on_time": {"hours": 9876},
    }

samples["nvme-healthy.json"] = nvme("/dev/nvme0", 0, 0, 100, 3, 38, 0, True)
# Reliability degraded (bit 2 of critical_warning) after media errors: health FAILED.
samples["nvme-media-errors.json"] = nvme("/dev/nvme1", 7, 4, 96, 41, 47, 8, False)

for name, doc in samples.items():
    with open(name, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
