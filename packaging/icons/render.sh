#!/usr/bin/env bash
# Re-render the installers' icons from the app's icon (resources/icons/lookahead-chat.svg): the PNG
# sizes the .deb installs and the Windows .ico.  Needs ImageMagick; the results are committed.
set -euo pipefail
cd "$(dirname "$0")"
cp ../../resources/icons/lookahead-chat.svg lookahead-chat.svg
for s in 16 32 48 64 128 256; do
    convert -background none -density 384 lookahead-chat.svg -resize "${s}x${s}" -depth 8 "lookahead-chat-$s.png"
done
convert lookahead-chat-{16,32,48,64,128,256}.png ../windows/lookahead-chat.ico
rm lookahead-chat-{16,32,64}.png
