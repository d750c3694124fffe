#!/bin/bash
set -euo pipefail
sed -i 's/if order_total > FREE_SHIPPING_THRESHOLD:/if order_total >= FREE_SHIPPING_THRESHOLD:/' /app/shipping.py
