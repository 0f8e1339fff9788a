#!/usr/bin/env python3
"""Generates the tables of Sources/HCI/AssignedNumbers+{UUIDs,Units,Companies,Appearance}.swift
from the Bluetooth SIG assigned numbers as the PyPI package `bluetooth-numbers` carries
them (services, characteristics, descriptors, company identifiers, and well-known
128-bit UUIDs), one file per kind of number.
Units and appearance categories, which that package does not carry, come from the
tables below (Assigned Numbers, sections 3.5 "Units" and 2.6 "Appearance Values").

Run: Scripts/assigned-numbers.sh (installs the pinned package in a throwaway venv).
The output is committed, so a build needs no network.
"""
import os
import sys
from uuid import UUID

import bluetooth_numbers
from bluetooth_numbers import characteristic, company, descriptor, service

VERSION = "1.1.2"

# Assigned Numbers §3.5 Units (the common ones; 16-bit UUIDs 0x27xx).
UNITS = {
    0x2700: "unitless", 0x2701: "metre", 0x2702: "kilogram", 0x2703: "second", 0x2704: "ampere",
    0x2705: "kelvin", 0x2706: "mole", 0x2707: "candela", 0x2710: "square metre", 0x2711: "cubic metre",
    0x2712: "metre per second", 0x2713: "metre per second squared", 0x2714: "reciprocal metre",
    0x2715: "kilogram per cubic metre", 0x2716: "kilogram per square metre", 0x2717: "cubic metre per kilogram",
    0x2718: "ampere per square metre", 0x2719: "ampere per metre", 0x271A: "mole per cubic metre",
    0x271B: "kilogram per cubic metre (mass concentration)", 0x271C: "candela per square metre",
    0x271D: "refractive index", 0x271E: "relative permeability", 0x2720: "radian", 0x2721: "steradian",
    0x2722: "hertz", 0x2723: "newton", 0x2724: "pascal", 0x2725: "joule", 0x2726: "watt", 0x2727: "coulomb",
    0x2728: "volt", 0x2729: "farad", 0x272A: "ohm", 0x272B: "siemens", 0x272C: "weber", 0x272D: "tesla",
    0x272E: "henry", 0x272F: "degree Celsius", 0x2730: "lumen", 0x2731: "lux", 0x2732: "becquerel",
    0x2733: "gray", 0x2734: "sievert", 0x2735: "katal", 0x2740: "pascal second", 0x2741: "newton metre",
    0x2742: "newton per metre", 0x2743: "radian per second", 0x2744: "radian per second squared",
    0x2745: "watt per square metre", 0x2746: "joule per kelvin", 0x2747: "joule per kilogram kelvin",
    0x2748: "joule per kilogram", 0x2749: "watt per metre kelvin", 0x274A: "joule per cubic metre",
    0x274B: "volt per metre", 0x274C: "coulomb per cubic metre", 0x274D: "coulomb per square metre",
    0x274E: "farad per metre", 0x274F: "henry per metre", 0x2750: "joule per mole",
    0x2751: "joule per mole kelvin", 0x2752: "coulomb per kilogram", 0x2753: "gray per second",
    0x2754: "watt per steradian", 0x2755: "watt per square metre steradian", 0x2756: "katal per cubic metre",
    0x2760: "minute", 0x2761: "hour", 0x2762: "day", 0x2763: "degree", 0x2764: "minute (angle)",
    0x2765: "second (angle)", 0x2766: "hectare", 0x2767: "litre", 0x2768: "tonne", 0x2780: "bar",
    0x2781: "millimetre of mercury", 0x2782: "ångström", 0x2783: "nautical mile", 0x2784: "barn",
    0x2785: "knot", 0x2786: "neper", 0x2787: "bel", 0x27A0: "yard", 0x27A1: "parsec", 0x27A2: "inch",
    0x27A3: "foot", 0x27A4: "mile", 0x27A5: "pound-force per square inch", 0x27A6: "kilometre per hour",
    0x27A7: "mile per hour", 0x27A8: "revolution per minute", 0x27A9: "gram calorie",
    0x27AA: "kilogram calorie", 0x27AB: "kilowatt hour", 0x27AC: "degree Fahrenheit", 0x27AD: "percentage",
    0x27AE: "per mille", 0x27AF: "beats per minute", 0x27B0: "ampere hours", 0x27B1: "milligram per decilitre",
    0x27B2: "millimole per litre", 0x27B3: "year", 0x27B4: "month", 0x27B5: "count per cubic metre",
    0x27B6: "watt per square metre (irradiance)", 0x27B7: "millilitre per kilogram per minute",
    0x27B8: "pound", 0x27B9: "metabolic equivalent", 0x27BA: "step per minute", 0x27BC: "stroke per minute",
    0x27BD: "kilometre per minute", 0x27BE: "lumen per watt", 0x27BF: "lumen hour", 0x27C0: "lux second",
    0x27C1: "gram per second", 0x27C2: "litre per second", 0x27C3: "decibel", 0x27C4: "parts per million",
    0x27C5: "parts per billion", 0x27C6: "milligram per decilitre per minute", 0x27C7: "kilovolt ampere hour",
    0x27C8: "volt ampere",
}

# Assigned Numbers §2.6 Appearance: categories (bits 15-6), and their common subcategories.
APPEARANCE_CATEGORIES = {
    0x000: "Unknown", 0x001: "Phone", 0x002: "Computer", 0x003: "Watch", 0x004: "Clock", 0x005: "Display",
    0x006: "Remote Control", 0x007: "Eye-glasses", 0x008: "Tag", 0x009: "Keyring", 0x00A: "Media Player",
    0x00B: "Barcode Scanner", 0x00C: "Thermometer", 0x00D: "Heart Rate Sensor", 0x00E: "Blood Pressure",
    0x00F: "Human Interface Device", 0x010: "Glucose Meter", 0x011: "Running Walking Sensor",
    0x012: "Cycling", 0x013: "Control Device", 0x014: "Network Device", 0x015: "Sensor", 0x016: "Light Fixtures",
    0x017: "Fan", 0x018: "HVAC", 0x019: "Air Conditioning", 0x01A: "Humidifier", 0x01B: "Heating",
    0x01C: "Access Control", 0x01D: "Motorized Device", 0x01E: "Power Device", 0x01F: "Light Source",
    0x020: "Window Covering", 0x021: "Audio Sink", 0x022: "Audio Source", 0x023: "Motorized Vehicle",
    0x024: "Domestic Appliance", 0x025: "Wearable Audio Device", 0x026: "Aircraft", 0x027: "AV Equipment",
    0x028: "Display Equipment", 0x029: "Hearing aid", 0x02A: "Gaming", 0x02B: "Signage",
    0x031: "Pulse Oximeter", 0x032: "Weight Scale", 0x033: "Personal Mobility Device",
    0x034: "Continuous Glucose Monitor", 0x035: "Insulin Pump", 0x036: "Medication Delivery",
    0x037: "Spirometer", 0x051: "Outdoor Sports Activity",
}
APPEARANCE_SUBCATEGORIES = {
    0x0041: "Desktop Workstation", 0x0042: "Server-class Computer", 0x0043: "Laptop", 0x0044: "Handheld PC/PDA",
    0x0045: "Palm-size PC/PDA", 0x0046: "Wearable computer", 0x0047: "Tablet", 0x0048: "Docking Station",
    0x0049: "All in One", 0x004A: "Blade Server", 0x004B: "Convertible", 0x004C: "Detachable",
    0x004D: "IoT Gateway", 0x004E: "Mini PC", 0x004F: "Stick PC", 0x00C1: "Sports Watch", 0x00C2: "Smartwatch",
    0x0141: "Generic Eye-glasses", 0x0301: "Ear Thermometer", 0x0341: "Heart Rate Belt",
    0x0381: "Arm Blood Pressure", 0x0382: "Wrist Blood Pressure", 0x03C1: "Keyboard", 0x03C2: "Mouse",
    0x03C3: "Joystick", 0x03C4: "Gamepad", 0x03C5: "Digitizer Tablet", 0x03C6: "Card Reader", 0x03C7: "Digital Pen",
    0x03C8: "Barcode Scanner", 0x03C9: "Touchpad", 0x03CA: "Presentation Remote", 0x0441: "In-Shoe Running Walking Sensor",
    0x0442: "On-Shoe Running Walking Sensor", 0x0443: "On-Hip Running Walking Sensor", 0x0481: "Cycling Computer",
    0x0482: "Speed Sensor", 0x0483: "Cadence Sensor", 0x0484: "Power Sensor", 0x0485: "Speed and Cadence Sensor",
    0x0541: "Motion Sensor", 0x0542: "Air quality Sensor", 0x0543: "Temperature Sensor", 0x0544: "Humidity Sensor",
    0x0545: "Leak Sensor", 0x0546: "Smoke Sensor", 0x0547: "Occupancy Sensor", 0x0548: "Contact Sensor",
    0x0549: "Carbon Monoxide Sensor", 0x054A: "Carbon Dioxide Sensor", 0x054B: "Ambient Light Sensor",
    0x054C: "Energy Sensor", 0x054D: "Color Light Sensor", 0x054E: "Rain Sensor", 0x054F: "Fire Sensor",
    0x0550: "Wind Sensor", 0x0551: "Proximity Sensor", 0x0552: "Multi-Sensor", 0x0581: "Wall Light",
    0x0582: "Ceiling Light", 0x0583: "Floor Light", 0x0841: "Earbud", 0x0842: "Headset", 0x0843: "Headphones",
    0x0844: "Neck Band", 0x0C41: "Fingertip Pulse Oximeter", 0x0C42: "Wrist Worn Pulse Oximeter",
    0x0A41: "In-ear hearing aid", 0x0A42: "Behind-ear hearing aid", 0x0A43: "Cochlear Implant",
}


# Names the package spells differently from the Bluetooth SIG: the Core Specification
# (Vol 3 Part G §3.3.3.2) and the SIG's own descriptors.yaml call 0x2901 "Characteristic
# User Description"; bluetooth-numbers 1.1.2 has "Characteristic User Descriptor".
DESCRIPTOR_CORRECTIONS = {0x2901: "Characteristic User Description"}


def swift_string(s):
    return s.replace("\\", "\\\\").replace('"', '\\"')


def table(name, doc, rows):
    lines = "\n".join(f"{k}\t{swift_string(v)}" for k, v in rows)
    return f'    /// {doc}\n    static let {name} = """\n{lines}\n"""\n'


def sixteen(d):
    return sorted((f"{k:04X}", v) for k, v in d.items() if isinstance(k, int) and k <= 0xFFFF)


def long_uuids(*dicts):
    rows = {}
    for d in dicts:
        for k, v in d.items():
            if isinstance(k, UUID):
                rows[str(k).upper()] = v
    return sorted(rows.items())


def header():
    return ("// Generated by Scripts/assigned-numbers.py from the PyPI package bluetooth-numbers "
            f"{VERSION}\n// (Bluetooth SIG assigned numbers) and the units and appearance tables in the script.\n"
            "// Do not edit: run Scripts/assigned-numbers.sh. One \"HEX\\tname\" per line, parsed on first use.\n\n")


def main(folder):
    assert bluetooth_numbers is not None
    files = {
        "UUIDs": [
            table("serviceTable", "16-bit service UUIDs.", sixteen(service)),
            table("characteristicTable", "16-bit characteristic UUIDs.", sixteen(characteristic)),
            table("descriptorTable", "16-bit descriptor UUIDs.", sixteen({**descriptor, **DESCRIPTOR_CORRECTIONS})),
            table("longUUIDTable", "Well-known 128-bit UUIDs (vendor services and characteristics).", long_uuids(service, characteristic, descriptor)),
        ],
        "Units": [table("unitTable", "16-bit unit UUIDs.", sorted((f"{k:04X}", v) for k, v in UNITS.items()))],
        "Companies": [table("companyTable", "Company identifiers.", sixteen(company))],
        "Appearance": [
            table("appearanceCategoryTable", "Appearance categories (the value's bits 15-6).", sorted((f"{k:03X}", v) for k, v in APPEARANCE_CATEGORIES.items())),
            table("appearanceTable", "Appearance values with a subcategory.", sorted((f"{k:04X}", v) for k, v in APPEARANCE_SUBCATEGORIES.items())),
        ],
    }
    for name, tables in files.items():
        out = os.path.join(folder, f"AssignedNumbers+{name}.swift")
        with open(out, "w", encoding="utf-8") as f:
            f.write(header() + "extension AssignedNumbers {\n" + "".join(tables) + "}\n")
        print(f"wrote {out}")
    # The single file this script wrote before the tables were split by kind.
    old = os.path.join(folder, "AssignedNumbers+Tables.swift")
    if os.path.exists(old):
        os.remove(old)
        print(f"removed {old}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "Sources/HCI")
